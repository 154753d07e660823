"""The PromQL printer: a rewrite walks the parsed tree and prints it back, never edits the text.

What the parser read prints as it was written (so a rewrite changes nothing but the nodes it replaced), and a
tree built from parts prints as PromQL that parses back to the same tree."""

from __future__ import annotations

import dataclasses

import pytest

from bottleneck_exporter.heuristics import promql
from bottleneck_exporter.heuristics.catalogue import resolve
from bottleneck_exporter.heuristics.promql import (
    Matcher,
    Node,
    Number,
    PromQLError,
    Selector,
    children,
    parse,
    transform,
    unparse,
)
from bottleneck_exporter.heuristics.sources import BUNDLES


def _built(node: Node) -> Node:
    """``node`` as if a transform had built it from parts: no layout anywhere."""
    kids = tuple(_built(kid) for kid in children(node))
    return dataclasses.replace(promql._with_children(node, kids) if kids else node, layout=None)


def test_every_rule_of_every_bundle_prints_back_exactly_as_generated() -> None:
    for bundle in BUNDLES:
        catalogue = resolve(bundle=bundle)
        rules = [r.expr for r in catalogue.records] + [t for r in catalogue.alerts for t in (r.expr, r.inline_expr)]
        for text in rules:
            assert unparse(parse(text)) == text, (bundle, text)


@pytest.mark.parametrize("text", [
    "(a)", "  ( a + b ) ", "-x", "+x", "a ^ b ^ c", "sum by (a) (x) ", "quantile(0.5, x) by (a)",
    'x{a="b\\"c"}[ 5m ]', "rate(x[$__rate_interval])", "increase(x[${window}])",
])
def test_what_the_parser_read_prints_as_written(text: str) -> None:
    assert unparse(parse(text)) == text


@pytest.mark.parametrize("text", [
    'sum without (a) (rate(x{m="1"}[5m])) / on (i) group_left () y', "(a + b) * c", "a - (b - c)", "(a ^ b) ^ c",
    "a ^ (b ^ c)", "-(a + b)", 'label_replace(x, "a", "$1", "b", "(.+)")', "quantile by (j) (0.5, x)",
    "a > bool 1", "a unless on (i) b or c and d", 'x{a=~"back\\\\slash", b!="new\\nline"}', "rate(x[1m30s])",
])
def test_a_tree_built_from_parts_prints_as_promql_that_parses_back_to_it(text: str) -> None:
    assert parse(unparse(_built(parse(text)))) == parse(text)


def test_a_replaced_node_is_printed_in_place_and_the_rest_as_written() -> None:
    tree = parse("sum by (instance) (\n  rate(a[5m])\n) / b")
    replaced = transform(tree, lambda n: Selector((Matcher("__name__", "=", "c"),), 300.0)
                         if isinstance(n, Selector) and n.range_seconds else None)
    assert unparse(replaced) == "sum by (instance) (\n  rate(c[5m])\n) / b"
    # An operator expression where an operand stood keeps its precedence: parentheses.
    doubled = transform(tree, lambda n: promql.Binary("*", n, Number(2)) if unparse(n) == "b" else None)
    assert unparse(doubled) == "sum by (instance) (\n  rate(a[5m])\n) / (b * 2)"


def test_a_dashboard_s_range_variable_parses_and_is_refused_when_evaluated() -> None:
    tree = parse("rate(x[$__rate_interval])")
    assert isinstance(tree, promql.Call) and tree.args[0] == Selector((Matcher("__name__", "=", "x"),), None,
                                                                      "$__rate_interval")
    with pytest.raises(PromQLError, match="dashboard's variable"):
        promql.evaluate(tree, promql.SeriesStore(), 0.0)
