"""The Python PromQL evaluator (exporter/heuristics/promql.py) on its own: the parser, each construct the catalogue's
expressions use, counter resets in rate() and increase(), and the errors for what it does not evaluate.

Every expected value is worked out by hand in the test, with Prometheus 2.x's semantics (the subtle arithmetic,
rate's extrapolation, was checked against promtool once); tests/test_diagnose.py checks the evaluator against
promtool on the whole scenario table. ``for:`` is not the evaluator's: tests/test_verdicts.py covers it.
"""

from __future__ import annotations

import math
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest
import yaml

from bottleneck_exporter.heuristics.promql import (
    Aggregate,
    Binary,
    Matcher,
    Number,
    PromQLError,
    Selector,
    SeriesStore,
    evaluate,
    parse,
    parse_duration,
)
from tests.conftest import require_tool

Labels = tuple[tuple[str, str], ...]


def store(*series: tuple[Mapping[str, str], Sequence[tuple[float, float]]]) -> SeriesStore:
    out = SeriesStore()
    for labels, points in series:
        out.add(labels, points)
    return out


def vector(expr: str, series: SeriesStore, at: float = 0.0) -> dict[Labels, float]:
    """The result of ``expr`` as {sorted labels: value}: the order of a vector means nothing."""
    result = evaluate(expr, series, at)
    assert isinstance(result, list), f"{expr} gave the scalar {result}"
    found = {tuple(sorted(s.labels.items())): s.value for s in result}
    assert len(found) == len(result), f"{expr} gave two samples with the same labels: {result}"
    return found


def scalar(expr: str, at: float = 0.0) -> float:
    result = evaluate(expr, SeriesStore(), at)
    assert isinstance(result, float), f"{expr} gave the vector {result}"
    return result


def key(**labels: str) -> Labels:
    return tuple(sorted(labels.items()))


def name(metric: str) -> Matcher:
    return Matcher("__name__", "=", metric)


# ---------------------------------------------------------------------------------------------- parsing


@pytest.mark.parametrize(("expr", "value"), [
    ("1 + 2 * 3", 7.0),
    ("(1 + 2) * 3", 9.0),
    ("10 - 4 - 3", 3.0),  # left-associative
    ("100 / 10 / 5", 2.0),
    ("7 % 4", 3.0),
    ("2 ^ 3 ^ 2", 512.0),  # right-associative: 2 ^ 9
    ("-2 ^ 2", -4.0),  # unary minus binds looser than ^, as in Prometheus
    ("2 ^ -1 * 4", 2.0),
    ("2 ^ -1", 0.5),
    ("- - 3", 3.0),
    ("+3", 3.0),
    ("1e3 + .5", 1000.5),
    ("1 < bool 2", 1.0),
    ("2 == bool 3", 0.0),
])
def test_arithmetic_follows_prometheus_precedence_and_associativity(expr: str, value: float) -> None:
    assert scalar(expr) == value


def test_set_operators_bind_looser_than_comparisons_and_or_loosest() -> None:
    a, b, c = (Selector((name(n),)) for n in "abc")
    assert parse("a or b and c") == Binary("or", a, Binary("and", b, c))
    assert parse("a unless b or c") == Binary("or", Binary("unless", a, b), c)
    assert parse("a > 1 and b") == Binary("and", Binary(">", a, Number(1.0)), b)
    assert parse("a + b > c") == Binary(">", Binary("+", a, b), c)


def test_matching_modifiers_are_parsed_onto_the_operator() -> None:
    node = parse("a / on (instance, gpu) group_left (uuid) b")
    assert isinstance(node, Binary)
    assert (node.on, node.ignoring, node.group_left) == (("instance", "gpu"), (), ("uuid",))
    node = parse("a - ignoring (cause) group_left b")
    assert isinstance(node, Binary)
    assert (node.on, node.ignoring, node.group_left) == (None, ("cause",), ())
    node = parse("a >= bool b")
    assert isinstance(node, Binary) and node.return_bool and node.on is None and node.group_left is None


def test_an_aggregation_takes_its_grouping_before_or_after_the_expression() -> None:
    assert parse("sum by (instance) (x)") == parse("sum(x) by (instance)") == Aggregate(
        "sum", Selector((name("x"),)), None, ("instance",), False)
    assert parse("max without (cpu, mode) (x)") == Aggregate("max", Selector((name("x"),)), None, ("cpu", "mode"),
                                                             True)
    assert parse("quantile(0.9, x)") == Aggregate("quantile", Selector((name("x"),)), Number(0.9))


def test_a_selector_keeps_its_matchers_quoting_and_range() -> None:
    assert parse("""x{a="v", b!="w", c=~'p.*', d!~"q\\"r"}[1m30s]""") == Selector(
        (name("x"), Matcher("a", "=", "v"), Matcher("b", "!=", "w"), Matcher("c", "=~", "p.*"),
         Matcher("d", "!~", 'q"r')), 90.0)
    assert parse('{__name__=~"a|b"}') == Selector((Matcher("__name__", "=~", "a|b"),))


@pytest.mark.parametrize(("text", "seconds"), [("5m", 300.0), ("1m30s", 90.0), ("1h", 3600.0), ("500ms", 0.5),
                                               ("2d", 172800.0), ("1w", 604800.0)])
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "5", "m5", "5x", "5m 3s", "1.5m", "-5m"])
def test_a_duration_that_is_not_one_is_refused(text: str) -> None:
    with pytest.raises(PromQLError, match="not a duration"):
        parse_duration(text)


# ---------------------------------------------------------------------------------------------- selectors

LABELLED = store(
    ({"__name__": "x", "a": "foo", "b": "1"}, [(0, 1.0)]),
    ({"__name__": "x", "a": "food"}, [(0, 2.0)]),
    ({"__name__": "x"}, [(0, 3.0)]),
    ({"__name__": "y", "a": "foo"}, [(0, 4.0)]),
)


@pytest.mark.parametrize(("expr", "values"), [
    ('x{a="foo"}', {1.0}),
    ('x{a!="foo"}', {2.0, 3.0}),  # a series without ``a`` has a == ""
    ('x{a=~"fo+"}', {1.0}),  # anchored: "food" does not match
    ('x{a=~"foo.*"}', {1.0, 2.0}),
    ('x{a!~"foo"}', {2.0, 3.0}),
    ('x{a=""}', {3.0}),
    ('x{a!=""}', {1.0, 2.0}),
    ('x{b=~"1|"}', {1.0, 2.0, 3.0}),
    ('{a="foo"}', {1.0, 4.0}),
    ('{__name__=~"x|y", a="foo"}', {1.0, 4.0}),
])
def test_label_matchers(expr: str, values: set[float]) -> None:
    assert set(vector(expr, LABELLED).values()) == values


def test_an_instant_selector_reads_the_last_sample_at_or_before_the_time_within_five_minutes() -> None:
    series = store(({"__name__": "x"}, [(0, 1.0), (60, 2.0), (1000, 3.0)]))
    assert vector("x", series, 59) == {key(__name__="x"): 1.0}
    assert vector("x", series, 60) == {key(__name__="x"): 2.0}
    assert vector("x", series, 359) == {key(__name__="x"): 2.0}
    assert vector("x", series, 360) == {key(__name__="x"): 2.0}  # exactly 5m old: still seen (Prometheus 2.x)
    assert vector("x", series, 361) == {}  # stale
    assert vector("x", series, -1) == {}  # nothing yet


def test_points_added_out_of_order_are_kept_in_time_order() -> None:
    series = store(({"__name__": "x"}, [(120, 3.0), (0, 1.0)]))
    series.add({"__name__": "x"}, [(60, 2.0)])
    [(labels, times, values)] = list(series.series())
    assert (labels, times, values) == ({"__name__": "x"}, [0, 60, 120], [1.0, 2.0, 3.0])
    assert vector("x", series, 90) == {key(__name__="x"): 2.0}


# ---------------------------------------------------------------------------------------------- rate, increase


def counter(*points: tuple[float, float], **labels: str) -> SeriesStore:
    return store(({"__name__": "c_total", **labels}, list(points)))


def test_rate_and_increase_extrapolate_to_the_window_edges_but_not_below_zero() -> None:
    """Samples at 60..240 s rising 1/s from 10, the window [0, 300]. The raw increase is 180. Toward the end
    the gap (60 s) is under 1.1 x the mean spacing (66 s): extrapolated in full, +60 s. Toward the start it
    would be 60 s too, but the counter, at 10 and rising 1/s, was 0 only 10 s before its first sample: +10 s.
    180 x (180 + 60 + 10) / 180 = 250 over 300 s."""
    series = counter((60, 10.0), (120, 70.0), (180, 130.0), (240, 190.0), instance="n")
    assert vector("increase(c_total[5m])", series, 300) == {key(instance="n"): pytest.approx(250.0)}
    assert vector("rate(c_total[5m])", series, 300) == {key(instance="n"): pytest.approx(250.0 / 300.0)}


def test_rate_and_increase_count_through_a_counter_reset() -> None:
    """100, 160, then a restart: 10, 70, 130. The increase is 60 + 10 + 60 + 60 = 190 (never 130 - 100 = 30),
    over the whole 4m window (the first sample is on its start, the last on its end)."""
    series = counter((0, 100.0), (60, 160.0), (120, 10.0), (180, 70.0), (240, 130.0))
    assert vector("increase(c_total[4m])", series, 240) == {(): pytest.approx(190.0)}
    assert vector("rate(c_total[4m])", series, 240) == {(): pytest.approx(190.0 / 240.0)}


def test_a_gap_longer_than_the_sample_spacing_extrapolates_by_half_a_spacing_only() -> None:
    """0, 60, 120 at 0, 60, 120 s, the window [0, 300]: 180 s from the last sample to the end is over 1.1 x
    60 s, so only 30 s is added: 120 x 150 / 120 = 150."""
    series = counter((0, 0.0), (60, 60.0), (120, 120.0))
    assert vector("increase(c_total[5m])", series, 300) == {(): pytest.approx(150.0)}
    assert vector("rate(c_total[5m])", series, 300) == {(): pytest.approx(0.5)}


def test_the_last_gap_is_extrapolated_in_full_only_under_1_1_times_the_sample_spacing() -> None:
    """0, 60, 120 at 0, 60, 120 s (spacing 60 s, so the threshold is 66 s), the window 4m: 65 s to the end
    is extrapolated in full (120 x 185 / 120), 67 s by half a spacing only (120 x 150 / 120)."""
    series = counter((0, 0.0), (60, 60.0), (120, 120.0))
    assert vector("increase(c_total[4m])", series, 185) == {(): pytest.approx(185.0)}
    assert vector("increase(c_total[4m])", series, 187) == {(): pytest.approx(150.0)}


def test_a_rate_needs_two_samples_in_its_window() -> None:
    series = counter((0, 5.0), (600, 9.0))
    assert vector("rate(c_total[5m])", series, 300) == {}
    assert vector("increase(c_total[5m])", series, 700) == {}


def test_a_range_window_includes_a_sample_on_its_start() -> None:
    series = counter((0, 0.0), (300, 30.0))
    assert vector("increase(c_total[5m])", series, 300) == {(): pytest.approx(30.0)}


def test_over_time_functions_read_the_samples_of_the_window() -> None:
    series = store(({"__name__": "g", "gpu": "0"}, [(0, 4.0), (60, 1.0), (120, 6.0), (180, 2.0)]))
    # [2m] at 180 s: the samples at 60, 120, 180 (the one at 0 is before the window).
    assert vector("avg_over_time(g[2m])", series, 180) == {key(gpu="0"): 3.0}
    assert vector("max_over_time(g[2m])", series, 180) == {key(gpu="0"): 6.0}
    assert vector("min_over_time(g[2m])", series, 180) == {key(gpu="0"): 1.0}
    assert vector("avg_over_time(g[10m])", series, 180) == {key(gpu="0"): 13.0 / 4}
    assert vector("avg_over_time(g[1m])", series, 1000) == {}


# ---------------------------------------------------------------------------------------------- aggregations

CPU = store(
    ({"__name__": "cpu", "instance": "a", "cpu": "0", "mode": "idle"}, [(0, 1.0)]),
    ({"__name__": "cpu", "instance": "a", "cpu": "1", "mode": "idle"}, [(0, 2.0)]),
    ({"__name__": "cpu", "instance": "a", "cpu": "0", "mode": "user"}, [(0, 4.0)]),
    ({"__name__": "cpu", "instance": "b", "cpu": "0", "mode": "idle"}, [(0, 8.0)]),
    ({"__name__": "cpu", "instance": "b", "cpu": "0", "mode": "user"}, [(0, math.nan)]),
)


@pytest.mark.parametrize(("expr", "expected"), [
    ("sum by (instance) (cpu{mode='idle'})", {key(instance="a"): 3.0, key(instance="b"): 8.0}),
    ("sum(cpu{mode='idle'}) by (instance)", {key(instance="a"): 3.0, key(instance="b"): 8.0}),
    ("sum without (cpu, mode) (cpu{mode='idle'})", {key(instance="a"): 3.0, key(instance="b"): 8.0}),
    ("sum without (cpu) (cpu{instance='a'})", {key(instance="a", mode="idle"): 3.0,
                                               key(instance="a", mode="user"): 4.0}),
    ("sum(cpu{instance='a'})", {(): 7.0}),
    ("count by (instance) (cpu)", {key(instance="a"): 3.0, key(instance="b"): 2.0}),
    ("group by (instance) (cpu)", {key(instance="a"): 1.0, key(instance="b"): 1.0}),  # NaN or not: 1
    ("count without (cpu) (cpu{instance='a'})", {key(instance="a", mode="idle"): 2.0,
                                                 key(instance="a", mode="user"): 1.0}),
    ("max by (instance) (cpu)", {key(instance="a"): 4.0, key(instance="b"): 8.0}),  # NaN is no maximum
    ("min by (instance) (cpu)", {key(instance="a"): 1.0, key(instance="b"): 8.0}),
    ("avg by (mode) (cpu{instance='a'})", {key(mode="idle"): 1.5, key(mode="user"): 4.0}),
    ("sum by (nothere) (cpu{instance='a'})", {(): 7.0}),  # a label none has: one group, without it
    ("sum by (instance) (cpu{instance='z'})", {}),
])
def test_aggregations_group_by_and_without(expr: str, expected: dict[Labels, float]) -> None:
    assert vector(expr, CPU) == expected


def test_max_and_min_skip_nan_and_are_nan_only_when_every_value_is() -> None:
    series = store(({"__name__": "g", "i": "a"}, [(0, math.nan)]), ({"__name__": "g", "i": "b"}, [(0, math.nan)]))
    assert math.isnan(vector("max(g)", series)[()]) and math.isnan(vector("min(g)", series)[()])
    series.add({"__name__": "g", "i": "c"}, [(0, -3.0)])
    assert vector("max(g)", series) == vector("min(g)", series) == {(): -3.0}


@pytest.mark.parametrize(("q", "value"), [
    (0.5, 20.0),
    (0.9, 28.0),  # rank 0.9 x 2 = 1.8: 20 + 0.8 x (30 - 20)
    (0.0, 10.0),
    (1.0, 30.0),
    (0.25, 15.0),
    (2.0, math.inf),
    (-1.0, -math.inf),
])
def test_quantile_interpolates_between_the_ranks(q: float, value: float) -> None:
    series = store(*(({"__name__": "q", "rank": r}, [(0, v)]) for r, v in (("0", 10.0), ("1", 30.0), ("2", 20.0))))
    assert vector(f"quantile({q}, q)", series) == {(): value}


RANKED = store(
    ({"__name__": "excess", "rank": "0", "phase": "forward"}, [(0, 3.0)]),
    ({"__name__": "excess", "rank": "0", "phase": "backward"}, [(0, 5.0)]),
    ({"__name__": "excess", "rank": "0", "phase": "optimizer"}, [(0, math.nan)]),
    ({"__name__": "excess", "rank": "1", "phase": "forward"}, [(0, -1.0)]),
    ({"__name__": "excess", "rank": "1", "phase": "backward"}, [(0, math.nan)]),
    ({"__name__": "excess", "rank": "2", "phase": "forward"}, [(0, math.nan)]),
)


def excess(rank: str, phase: str) -> Labels:
    return key(__name__="excess", rank=rank, phase=phase)


@pytest.mark.parametrize(("expr", "expected"), [
    # Each group's largest (smallest), every label kept, the name too; a NaN only where nothing else is left.
    ("topk by (rank) (1, excess)", {excess("0", "backward"): 5.0, excess("1", "forward"): -1.0,
                                    excess("2", "forward"): math.nan}),
    ("bottomk by (rank) (1, excess)", {excess("0", "forward"): 3.0, excess("1", "forward"): -1.0,
                                       excess("2", "forward"): math.nan}),
    ("topk without (phase) (2, excess{rank='0'})", {excess("0", "backward"): 5.0, excess("0", "forward"): 3.0}),
    ("topk(2, excess)", {excess("0", "backward"): 5.0, excess("0", "forward"): 3.0}),
    ("bottomk(1, excess)", {excess("1", "forward"): -1.0}),
    ("topk(1.9, excess)", {excess("0", "backward"): 5.0}),  # k is truncated
    ("topk(0, excess)", {}),
    ("topk by (rank) (5, excess{rank='1'})", {excess("1", "forward"): -1.0, excess("1", "backward"): math.nan}),
    ("topk by (rank) (1, excess * 2)", {key(rank="0", phase="backward"): 10.0, key(rank="1", phase="forward"): -2.0,
                                        key(rank="2", phase="forward"): math.nan}),
])
def test_topk_and_bottomk_select_samples_of_each_group(expr: str, expected: dict[Labels, float]) -> None:
    got = vector(expr, RANKED)
    assert got.keys() == expected.keys()
    for labels, value in expected.items():
        assert got[labels] == value or (math.isnan(value) and math.isnan(got[labels])), (labels, got[labels])


@pytest.mark.tools
def test_topk_and_bottomk_agree_with_promtool(tmp_path: Path) -> None:
    """The evaluator's answers, given to promtool as the expected ones for the same series (a rank's slowest
    phase, equal excesses told apart by the catalogue's nanosecond priorities, a NaN beside numbers): promtool
    fails where Prometheus answers differently. Not given to promtool: ties that nothing breaks (either engine
    picks by the order it holds the series in) and a NaN chosen (promtool never finds NaN equal to NaN)."""
    series = {
        'excess{rank="0", phase="forward"}': "0.25", 'excess{rank="0", phase="backward"}': "0.75",
        'excess{rank="0", phase="optimizer"}': "NaN", 'excess{rank="1", phase="forward"}': "-0.5",
        'excess{rank="1", phase="backward"}': "-0.5", 'excess{rank="1", phase="optimizer"}': "-0.25",
        'excess{rank="2", phase="forward"}': "NaN", 'excess{rank="2", phase="backward"}': "1",
        'priority{phase="forward"}': "3e-09",
        'priority{phase="backward"}': "2e-09", 'priority{phase="optimizer"}': "1e-09",
    }
    points = store(*(({m.name: m.value for m in parse(text).matchers}, [(0, float(value))])  # type: ignore[union-attr]
                     for text, value in series.items()))
    exprs = ["topk by (rank) (1, excess + on (phase) group_left () priority)",
             "bottomk by (rank) (1, excess + on (phase) group_left () priority)",
             "topk without (phase) (1, excess)", "bottomk(2, excess)", "topk by (rank) (1, excess)"]
    tests = []
    for expr in exprs:
        result = evaluate(expr, points, 0.0)
        assert isinstance(result, list) and result, expr
        tests.append({"expr": expr, "eval_time": "0m", "exp_samples": [
            {"labels": "{" + ", ".join(f'{k}="{v}"' for k, v in sorted(s.labels.items())) + "}",
             "value": s.value} for s in result]})
    (tmp_path / "empty.yml").write_text("groups: []\n")
    (tmp_path / "test.yml").write_text(yaml.safe_dump({
        "rule_files": ["empty.yml"], "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": [{"series": k, "values": v} for k, v in series.items()],
                   "promql_expr_test": tests}]}))
    run = subprocess.run([require_tool("promtool"), "test", "rules", "test.yml"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr


# ---------------------------------------------------------------------------------------------- binary operators

NUMBERS = store(
    ({"__name__": "x", "i": "a"}, [(0, 1.0)]),
    ({"__name__": "x", "i": "b"}, [(0, 5.0)]),
    ({"__name__": "x", "i": "c"}, [(0, 0.0)]),
)


@pytest.mark.parametrize(("expr", "expected"), [
    ("x * 2", {key(i="a"): 2.0, key(i="b"): 10.0, key(i="c"): 0.0}),  # arithmetic drops the name
    ("10 - x", {key(i="a"): 9.0, key(i="b"): 5.0, key(i="c"): 10.0}),
    ("-x", {key(i="a"): -1.0, key(i="b"): -5.0, key(i="c"): -0.0}),
    ("x > 1", {key(__name__="x", i="b"): 5.0}),  # a comparison filters and keeps the name
    ("x <= 1", {key(__name__="x", i="a"): 1.0, key(__name__="x", i="c"): 0.0}),
    ("x != 1", {key(__name__="x", i="b"): 5.0, key(__name__="x", i="c"): 0.0}),
    ("2 < x", {key(__name__="x", i="b"): 5.0}),  # the scalar on the left: the vector's value is kept
    ("x >= bool 1", {key(i="a"): 1.0, key(i="b"): 1.0, key(i="c"): 0.0}),
    ("x == bool 5", {key(i="a"): 0.0, key(i="b"): 1.0, key(i="c"): 0.0}),
])
def test_vector_and_scalar(expr: str, expected: dict[Labels, float]) -> None:
    assert vector(expr, NUMBERS) == expected


def test_division_by_zero_is_infinite_or_nan_as_in_ieee_754() -> None:
    result = vector("x / 0", NUMBERS)
    assert result[key(i="a")] == math.inf and result[key(i="b")] == math.inf and math.isnan(result[key(i="c")])
    assert vector("-x / 0", NUMBERS)[key(i="b")] == -math.inf
    assert scalar("1 / 0") == math.inf and math.isnan(scalar("0 / 0"))


def test_modulo_and_power_outside_their_domain_are_nan_or_infinite_not_a_crash() -> None:
    assert math.isnan(scalar("5 % 0"))
    assert math.isnan(scalar("(-8) ^ 0.5"))
    assert scalar("0 ^ -1") == math.inf
    assert scalar("(0 * -1) ^ -3") == -math.inf
    assert math.isnan(scalar("(1 / 0) % 2"))
    assert math.isnan(vector("x % 0", NUMBERS)[key(i="b")])


RANKS = store(
    ({"__name__": "wait", "instance": "n1", "rank": "0", "job": "j"}, [(0, 2.0)]),
    ({"__name__": "wait", "instance": "n1", "rank": "1", "job": "j"}, [(0, 6.0)]),
    ({"__name__": "wait", "instance": "n2", "rank": "2", "job": "j"}, [(0, 9.0)]),
    ({"__name__": "step", "instance": "n1", "rank": "0", "job": "j"}, [(0, 4.0)]),
    ({"__name__": "step", "instance": "n1", "rank": "1", "job": "j"}, [(0, 8.0)]),
    ({"__name__": "cores", "instance": "n1", "job": "node"}, [(0, 16.0)]),
    ({"__name__": "cores", "instance": "n2", "job": "node"}, [(0, 32.0)]),
    ({"__name__": "gpu_info", "instance": "n1", "gpu": "0", "uuid": "GPU-a"}, [(0, 1.0)]),
    ({"__name__": "gpu_info", "instance": "n2", "gpu": "0"}, [(0, 1.0)]),
    ({"__name__": "cause", "instance": "n1", "cause": "cpu"}, [(0, 1.0)]),
)


@pytest.mark.parametrize(("expr", "expected"), [
    # One-to-one on every label but the name; a sample with no partner is dropped.
    ("wait / step", {key(instance="n1", rank="0", job="j"): 0.5, key(instance="n1", rank="1", job="j"): 0.75}),
    ("wait > step", {}),
    ("step > wait", {key(__name__="step", instance="n1", rank="0", job="j"): 4.0,
                     key(__name__="step", instance="n1", rank="1", job="j"): 8.0}),
    ("wait - ignoring (cause) step", {key(instance="n1", rank="0", job="j"): -2.0,
                                      key(instance="n1", rank="1", job="j"): -2.0}),
    # on (...) keeps only the matched labels in a one-to-one result.
    ("sum by (instance) (wait) / on (instance) cores", {key(instance="n1"): 0.5, key(instance="n2"): 9.0 / 32}),
    ("sum by (instance) (wait) > on (instance) cores", {}),
    ("cores > on (instance) sum by (instance) (wait)", {key(instance="n1"): 16.0, key(instance="n2"): 32.0}),
    # Many-to-one: each rank against its node, the rank's labels kept.
    ("wait / on (instance) group_left cores", {key(instance="n1", rank="0", job="j"): 2.0 / 16,
                                               key(instance="n1", rank="1", job="j"): 6.0 / 16,
                                               key(instance="n2", rank="2", job="j"): 9.0 / 32}),
    ("wait >= on (instance) group_left cores / 4", {key(__name__="wait", instance="n1", rank="1", job="j"): 6.0,
                                                    key(__name__="wait", instance="n2", rank="2", job="j"): 9.0}),
    # group_left (label): copied from the one side; where the one side lacks it, the result lacks it.
    ("cores + on (instance) group_left (uuid) gpu_info", {key(instance="n1", job="node", uuid="GPU-a"): 17.0,
                                                           key(instance="n2", job="node"): 33.0}),
    ("cores * on (instance) group_left (cause) cause", {key(instance="n1", job="node", cause="cpu"): 16.0}),
])
def test_vector_matching(expr: str, expected: dict[Labels, float]) -> None:
    assert vector(expr, RANKS) == expected


def test_many_to_one_must_say_group_left_and_the_one_side_must_be_one() -> None:
    with pytest.raises(PromQLError, match="many-to-one matching must be explicit"):
        evaluate("wait / on (instance) cores", RANKS, 0.0)
    with pytest.raises(PromQLError, match=r"duplicate series .* right hand-side"):
        evaluate("cores / on (instance) wait", RANKS, 0.0)
    with pytest.raises(PromQLError, match="duplicate series"):
        evaluate("cores / on (instance) group_left wait", RANKS, 0.0)


@pytest.mark.parametrize(("expr", "expected"), [
    ("wait and step", {key(__name__="wait", instance="n1", rank="0", job="j"): 2.0,
                       key(__name__="wait", instance="n1", rank="1", job="j"): 6.0}),
    ("wait unless step", {key(__name__="wait", instance="n2", rank="2", job="j"): 9.0}),
    ("wait and on (instance) cause", {key(__name__="wait", instance="n1", rank="0", job="j"): 2.0,
                                      key(__name__="wait", instance="n1", rank="1", job="j"): 6.0}),
    ("cores unless on (instance) cause", {key(__name__="cores", instance="n2", job="node"): 32.0}),
    ("cause or cores", {key(__name__="cause", instance="n1", cause="cpu"): 1.0,
                        key(__name__="cores", instance="n1", job="node"): 16.0,
                        key(__name__="cores", instance="n2", job="node"): 32.0}),
    # on (instance): a right-hand sample whose instance the left already has is left out.
    ("cause or on (instance) cores", {key(__name__="cause", instance="n1", cause="cpu"): 1.0,
                                      key(__name__="cores", instance="n2", job="node"): 32.0}),
    ("nothing or on (instance) cores", {key(__name__="cores", instance="n1", job="node"): 16.0,
                                        key(__name__="cores", instance="n2", job="node"): 32.0}),
    ("wait and on () cause", {key(__name__="wait", instance="n1", rank="0", job="j"): 2.0,
                              key(__name__="wait", instance="n1", rank="1", job="j"): 6.0,
                              key(__name__="wait", instance="n2", rank="2", job="j"): 9.0}),
])
def test_set_operators(expr: str, expected: dict[Labels, float]) -> None:
    assert vector(expr, RANKS) == expected


# ---------------------------------------------------------------------------------------------- functions


def test_absent_names_the_equality_matchers_of_a_selector_that_selects_nothing() -> None:
    assert vector('absent(up{job="bottleneck-exporter", instance=~"n.*"})', NUMBERS) == {
        key(job="bottleneck-exporter"): 1.0}
    assert vector('absent(x{i="a"})', NUMBERS) == {}
    assert vector("absent(sum(nothing))", NUMBERS) == {(): 1.0}
    assert vector("absent(sum(x))", NUMBERS) == {}


def test_vector_and_time() -> None:
    assert vector("vector(1)", NUMBERS) == {(): 1.0}
    assert vector("vector(time())", NUMBERS, 42.0) == {(): 42.0}
    assert scalar("time() - 2", 42.0) == 40.0
    assert vector("x - time()", NUMBERS, 1.0)[key(i="b")] == 4.0


@pytest.mark.parametrize(("expr", "expected"), [
    # A capture group copied into a new label; the name stays.
    ('label_replace(up, "host", "$1", "instance", "(.*):.*")',
     {key(__name__="up", instance="n1:9100", host="n1"): 1.0, key(__name__="up", instance="n2"): 1.0}),
    ('label_replace(up, "host", "${1}-x", "instance", "(n1):9100")',
     {key(__name__="up", instance="n1:9100", host="n1-x"): 1.0, key(__name__="up", instance="n2"): 1.0}),
    # Anchored: "n" does not match all of "n2".
    ('label_replace(up, "host", "$1", "instance", "(n)")',
     {key(__name__="up", instance="n1:9100"): 1.0, key(__name__="up", instance="n2"): 1.0}),
    # An empty result removes the label.
    ('label_replace(up, "instance", "", "instance", "n2")',
     {key(__name__="up", instance="n1:9100"): 1.0, key(__name__="up"): 1.0}),
])
def test_label_replace(expr: str, expected: dict[Labels, float]) -> None:
    series = store(({"__name__": "up", "instance": "n1:9100"}, [(0, 1.0)]), ({"__name__": "up", "instance": "n2"},
                                                                             [(0, 1.0)]))
    assert vector(expr, series) == expected


# ---------------------------------------------------------------------------------------------- errors


@pytest.mark.parametrize(("expr", "message"), [
    ("histogram_quantile(0.9, rate(x_bucket[5m]))", r"histogram_quantile\(\) is not supported"),
    ("stddev(x)", r"stddev\(\) is not supported"),
    # offset and @ are refused by the tokenizer (a bare duration and @ are no tokens), before the parser could
    # name them.
    ("rate(x[5m] offset 1m)", "unexpected character ' 1m\\)'"),
    ("x @ 100", "unexpected character ' @ 100'"),
    ("a / on (i) group_right b", "group_right is not supported"),
    ("rate(x[5m:1m])", "unexpected character"),
    ("rate(x)", r"rate\(\) needs one range selector"),
    ("increase(x[5m], y[5m])", r"increase\(\) needs one range selector"),
    ("x{a=b}", "expected a quoted label value"),
    ("x{a~\"b\"}", "unexpected character '~"),
    ("x{1=\"b\"}", "expected a label name"),
    ("sum by (1) (x)", "expected a label name"),
    ("(x + 1", r"expected '\)'"),
    ("x + 1)", r"unexpected '\)'"),
    ("x y", "unexpected 'y'"),
    ("x +", "unexpected 'end of expression'"),
    ("$x", "unexpected character"),
    ("time(1)", r"time\(\) takes no arguments"),
    ("absent(x, y)", r"absent\(\) takes one instant vector"),
    ("vector()", r"vector\(\) takes one scalar"),
    ('label_replace(x, "a", "b", "c")', r"label_replace\(\) takes a vector and four strings"),
    ('label_replace("x", "a", "b", "c", "d")', r"label_replace\(\) takes a vector and four strings"),
])
def test_what_it_cannot_parse_is_a_promql_error_naming_it(expr: str, message: str) -> None:
    with pytest.raises(PromQLError, match=message):
        parse(expr)


@pytest.mark.parametrize(("expr", "message"), [
    ("x[5m]", "a range selector needs a function"),
    ('"text"', "only allowed as an argument of label_replace"),
    ("1 < 2", "comparisons between scalars must use bool"),
    ("x and 1", "'and' needs vectors on both sides"),
    ("sum(1)", r"sum\(\) needs a vector, got a scalar"),
    ("vector(x)", r"vector\(\) needs a scalar"),
    ("absent(1)", r"absent\(\) needs an instant vector"),
    ("label_replace(1, \"a\", \"b\", \"c\", \"d\")", r"label_replace\(\) needs an instant vector"),
    ('label_replace(x, "a", "b", "i", "(")', r"label_replace\(\): invalid regex"),
    ("quantile(x, x)", r"quantile\(\) needs a scalar first argument"),
    ("topk(x, x)", r"topk\(\) needs a finite scalar first argument"),
    ("bottomk(1 / 0, x)", r"bottomk\(\) needs a finite scalar first argument"),
])
def test_what_it_cannot_evaluate_is_a_promql_error_naming_it(expr: str, message: str) -> None:
    with pytest.raises(PromQLError, match=message):
        evaluate(expr, NUMBERS, 0.0)
