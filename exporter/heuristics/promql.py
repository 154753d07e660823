"""A small PromQL evaluator: the subset the heuristics catalogue uses, with Prometheus 2.x semantics.

It lets ``diagnose`` evaluate the very alert expressions that Prometheus runs, over series sampled on
this node with no Prometheus at hand, so the Python verdicts and the alert rules cannot drift apart.
The scenario table checks it against ``promtool test rules`` on every heuristic.

Supported: selectors with ``= != =~ !~`` matchers and ``[range]``; ``rate``, ``increase``,
``avg_over_time``, ``max_over_time``, ``min_over_time``, ``deriv``, ``time``, ``absent``, ``vector``, ``label_replace``;
``sum avg min max count group quantile topk bottomk``
with ``by``/``without``; arithmetic, comparisons (with ``bool``), ``and or unless``, ``on``/``ignoring``
and ``group_left``. Anything else is a :class:`PromQLError` naming the construct. A range may be a
dashboard's variable (``[$__rate_interval]``): such an expression parses, for Grafana to fill in, and evaluating
it is an error.

:func:`unparse` prints a tree back: what the parser read as it was written (its spacing, its parentheses),
what a transform (:func:`transform`) put in its place in the canonical spelling. A rewrite (our selector → a
peer's, a dashboard's matchers added to every selector) walks the tree, never the text::

    >>> unparse(transform(parse("rate(up[5m]) > 0"), lambda n: Number(1) if isinstance(n, Call) else None))
    '1 > 0'

    >>> store = SeriesStore()
    >>> store.add({"__name__": "up", "instance": "a"}, [(0, 1.0)])
    >>> evaluate("up == 1", store, 0.0)
    [Sample(labels={'__name__': 'up', 'instance': 'a'}, value=1.0)]
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import math
import operator
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TypeVar

LOOKBACK_SECONDS = 300.0
DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0, "y": 31536000.0}
AGGREGATIONS = ("sum", "avg", "min", "max", "count", "group", "quantile", "topk", "bottomk")
# The aggregations that take a parameter before their vector, and those that select samples of a group (their
# labels kept whole) rather than compute one sample per group.
PARAMETRIC = ("quantile", "topk", "bottomk")
SELECTING = ("topk", "bottomk")
RANGE_FUNCTIONS = ("rate", "increase", "avg_over_time", "max_over_time", "min_over_time", "deriv")
COMPARISONS = ("==", "!=", ">", "<", ">=", "<=")


class PromQLError(ValueError):
    """An expression outside the supported subset, a syntax error, or a matching error."""


@dataclasses.dataclass
class Sample:
    labels: dict[str, str]
    value: float


Vector = list[Sample]
Value = float | Vector


# ---------------------------------------------------------------------------------------------- storage


_TIME, _VALUE = operator.itemgetter(0), operator.itemgetter(1)


SeriesKey = tuple[tuple[str, str], ...]


class SeriesStore:
    """Sampled series: labels (``__name__`` included) → time-ordered (seconds, value) points, indexed by metric
    name: a selector naming its metric reads only that metric's series, not the whole store (a node at the push
    bounds holds thousands of series, and one alert expression has a dozen selectors).

    A series can also end: ``went_stale`` times are where a scrape no longer had it (Prometheus' staleness
    markers). An instant selector then no longer returns it, though its last point is within the lookback; a
    range selector still reads its points, as Prometheus' does."""

    def __init__(self) -> None:
        self._series: dict[SeriesKey, tuple[list[float], list[float]]] = {}
        self._by_name: dict[str, list[SeriesKey]] = {}
        self._stale: dict[SeriesKey, list[float]] = {}

    def add(self, labels: Mapping[str, str], points: Iterable[tuple[float, float]],
            went_stale: Iterable[float] = ()) -> None:
        key = tuple(sorted(labels.items()))
        if key not in self._series:
            self._by_name.setdefault(labels.get("__name__", ""), []).append(key)
        went = list(went_stale)
        if went:  # sorted only when a stale time is added, not at every sample of a series that went stale once
            self._stale[key] = sorted([*self._stale.get(key, ()), *went])
        times, values = self._series.setdefault(key, ([], []))
        if not times:  # a new series: its points at once, in time order (equal times keep their order)
            ordered = sorted(points, key=_TIME)
            times.extend(map(_TIME, ordered))
            values.extend(map(_VALUE, ordered))
            return
        for t, v in points:
            index = bisect.bisect_right(times, t)
            times.insert(index, t)
            values.insert(index, v)

    def series(self, name: str | None = None) -> Iterable[tuple[dict[str, str], list[float], list[float]]]:
        """Every series, or only those of metric ``name``."""
        for key, times, values in self.keyed(name):
            yield dict(key), times, values

    def keyed(self, name: str | None = None) -> Iterable[tuple[SeriesKey, list[float], list[float]]]:
        """``series``, each with its key (its sorted labels) for ``ended``."""
        for key in self._series if name is None else self._by_name.get(name, ()):
            times, values = self._series[key]
            yield key, times, values

    def ended(self, key: SeriesKey, since: float, at: float) -> bool:
        """Whether series ``key`` went stale after its point at ``since`` and by ``at``."""
        stale = self._stale.get(key)
        if not stale:
            return False
        index = bisect.bisect_right(stale, at) - 1
        return index >= 0 and stale[index] > since

    def __len__(self) -> int:
        return len(self._series)


# ---------------------------------------------------------------------------------------------- syntax


@dataclasses.dataclass(frozen=True)
class Matcher:
    name: str
    op: str
    value: str

    def matches(self, labels: Mapping[str, str]) -> bool:
        actual = labels.get(self.name, "")
        if self.op == "=":
            return actual == self.value
        if self.op == "!=":
            return actual != self.value
        found = re.fullmatch(self.value, actual) is not None
        return found if self.op == "=~" else not found


@dataclasses.dataclass(frozen=True)
class Selector:
    matchers: tuple[Matcher, ...]
    range_seconds: float | None = None
    # A dashboard's variable in place of the range's duration ("$__rate_interval"): no range_seconds then.
    range_variable: str = ""
    # What the parser read around the children (before the first, between two, after the last; a leaf: its whole
    # text), for unparse(); None for a node built from parts. Not part of the node's value.
    layout: tuple[str, ...] | None = dataclasses.field(default=None, compare=False, repr=False)


@dataclasses.dataclass(frozen=True)
class Number:
    value: float
    # What the parser read around the children (before the first, between two, after the last; a leaf: its whole
    # text), for unparse(); None for a node built from parts. Not part of the node's value.
    layout: tuple[str, ...] | None = dataclasses.field(default=None, compare=False, repr=False)


@dataclasses.dataclass(frozen=True)
class String:
    """A string literal: only as an argument of label_replace()."""

    value: str
    # What the parser read around the children (before the first, between two, after the last; a leaf: its whole
    # text), for unparse(); None for a node built from parts. Not part of the node's value.
    layout: tuple[str, ...] | None = dataclasses.field(default=None, compare=False, repr=False)


@dataclasses.dataclass(frozen=True)
class Call:
    func: str
    args: tuple[Node, ...]
    # What the parser read around the children (before the first, between two, after the last; a leaf: its whole
    # text), for unparse(); None for a node built from parts. Not part of the node's value.
    layout: tuple[str, ...] | None = dataclasses.field(default=None, compare=False, repr=False)


@dataclasses.dataclass(frozen=True)
class Aggregate:
    op: str
    expr: Node
    param: Node | None = None
    grouping: tuple[str, ...] = ()
    without: bool = False
    # What the parser read around the children (before the first, between two, after the last; a leaf: its whole
    # text), for unparse(); None for a node built from parts. Not part of the node's value.
    layout: tuple[str, ...] | None = dataclasses.field(default=None, compare=False, repr=False)


@dataclasses.dataclass(frozen=True)
class Binary:
    op: str
    lhs: Node
    rhs: Node
    return_bool: bool = False
    on: tuple[str, ...] | None = None
    ignoring: tuple[str, ...] = ()
    group_left: tuple[str, ...] | None = None
    # What the parser read around the children (before the first, between two, after the last; a leaf: its whole
    # text), for unparse(); None for a node built from parts. Not part of the node's value.
    layout: tuple[str, ...] | None = dataclasses.field(default=None, compare=False, repr=False)


@dataclasses.dataclass(frozen=True)
class Negate:
    expr: Node
    # What the parser read around the children (before the first, between two, after the last; a leaf: its whole
    # text), for unparse(); None for a node built from parts. Not part of the node's value.
    layout: tuple[str, ...] | None = dataclasses.field(default=None, compare=False, repr=False)


Node = Selector | Number | String | Call | Aggregate | Binary | Negate
N = TypeVar("N", Selector, Number, String, Call, Aggregate, Binary, Negate)

TOKEN = re.compile(
    r"""\s*(?:
      (?P<number>(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?(?![a-zA-Z_:]))
    | (?P<duration>\[\s*(?:(?:\d+(?:ms|[smhdwy]))+|\$\w+|\$\{\w+\})\s*\])
    | (?P<ident>[a-zA-Z_:][a-zA-Z0-9_:]*)
    | (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')
    | (?P<op>==|!=|>=|<=|=~|!~|[-+*/%^(){},=<>])
    )""",
    re.VERBOSE,
)


def parse_duration(text: str) -> float:
    """``5m`` → 300.0; ``1m30s`` → 90.0. Raises PromQLError for anything else."""
    parts = re.findall(r"(\d+)(ms|[smhdwy])", text)
    if not parts or "".join(n + u for n, u in parts) != text.strip():
        raise PromQLError(f"not a duration: {text!r}")
    return sum(int(n) * DURATION_UNITS[u] for n, u in parts)


class Parser:
    """Precedence climbing, lowest first: or; and unless; comparisons; + -; * / %; unary minus; ^ (Prometheus
    gives a unary operator the precedence of *: -2 ^ 2 is -4).

    Every node it builds keeps its ``layout``: the text between its children as written, so that
    ``unparse(parse(text)) == text``."""

    LEVELS: tuple[tuple[str, ...], ...] = (("or",), ("and", "unless"), COMPARISONS, ("+", "-"), ("*", "/", "%"))

    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens: list[tuple[str, str, int, int]] = []  # kind, text, start and end offset
        pos = 0
        while pos < len(text):
            if text[pos:].strip() == "":
                break
            match = TOKEN.match(text, pos)
            if match is None:
                raise PromQLError(f"unexpected character {text[pos:pos + 10]!r} at offset {pos}")
            kind = match.lastgroup or ""
            self.tokens.append((kind, match.group(kind), match.start(kind), match.end(kind)))
            pos = match.end()
        self.pos = 0
        # id of each node built → its text's (start, end) offsets, and the node itself so that its id stays its own
        self.spans: dict[int, tuple[int, int, Node]] = {}

    def peek(self, offset: int = 0) -> tuple[str, str]:
        index = self.pos + offset
        return self.tokens[index][:2] if index < len(self.tokens) else ("end", "")

    def take(self, value: str | None = None) -> tuple[str, str]:
        token = self.peek()
        if value is not None and token[1] != value:
            raise PromQLError(f"expected {value!r}, found {token[1] or 'end of expression'!r} in {self.text!r}")
        self.pos += 1
        return token

    def start(self) -> int:
        """Offset of the next token: where the construct about to be parsed begins."""
        return self.tokens[self.pos][2] if self.pos < len(self.tokens) else len(self.text)

    def laid_out(self, node: N, start: int) -> N:
        """``node``, whose text runs from ``start`` to the last token taken, with its layout."""
        end = self.tokens[self.pos - 1][3]
        gaps, at = [], start
        for child in children(node):
            child_start, child_end, _ = self.spans[id(child)]
            gaps.append(self.text[at:child_start])
            at = child_end
        gaps.append(self.text[at:end])
        built = dataclasses.replace(node, layout=tuple(gaps))
        self.spans[id(built)] = (start, end, built)
        return built

    def parse(self) -> Node:
        node = self.binary(0)
        if self.peek()[0] != "end":
            raise PromQLError(f"unexpected {self.peek()[1]!r} in {self.text!r}")
        # The root's layout takes in what surrounds it too: parentheses around the whole, spaces.
        start, end, _ = self.spans[id(node)]
        gaps = list(node.layout or ("",))
        gaps[0] = self.text[:start] + gaps[0]
        gaps[-1] += self.text[end:]
        return dataclasses.replace(node, layout=tuple(gaps))

    def binary(self, level: int) -> Node:
        if level == len(self.LEVELS):
            return self.unary()
        start = self.start()
        node = self.binary(level + 1)
        while self.peek()[1] in self.LEVELS[level]:
            op = self.take()[1]
            return_bool = False
            if self.peek()[1] == "bool":
                self.take()
                return_bool = True
            on: tuple[str, ...] | None = None
            ignoring: tuple[str, ...] = ()
            group_left: tuple[str, ...] | None = None
            if self.peek()[1] in ("on", "ignoring"):
                keyword = self.take()[1]
                labels = self.label_list()
                if keyword == "on":
                    on = labels
                else:
                    ignoring = labels
                if self.peek()[1] in ("group_left", "group_right"):
                    if self.take()[1] == "group_right":
                        raise PromQLError("group_right is not supported; swap the operands and use group_left")
                    group_left = self.label_list() if self.peek()[1] == "(" else ()
            rhs = self.binary(level + 1)
            node = self.laid_out(Binary(op, node, rhs, return_bool, on, ignoring, group_left), start)
        return node

    def power(self) -> Node:
        start = self.start()
        node = self.primary()
        if self.peek()[1] == "^":
            self.take()
            return self.laid_out(Binary("^", node, self.unary()), start)
        return node

    def unary(self) -> Node:
        start = self.start()
        if self.peek()[1] == "-":
            self.take()
            return self.laid_out(Negate(self.unary()), start)
        if self.peek()[1] == "+":
            self.take()
            return self.unary()
        return self.power()

    def label_list(self) -> tuple[str, ...]:
        self.take("(")
        labels: list[str] = []
        while self.peek()[1] != ")":
            kind, name = self.take()
            if kind != "ident":
                raise PromQLError(f"expected a label name, found {name!r} in {self.text!r}")
            labels.append(name)
            if self.peek()[1] == ",":
                self.take()
        self.take(")")
        return tuple(labels)

    def primary(self) -> Node:
        start = self.start()
        kind, value = self.peek()
        if kind == "number":
            self.take()
            return self.laid_out(Number(float(value)), start)
        if kind == "string":
            self.take()
            return self.laid_out(String(unquote(value)), start)
        if value == "(":
            self.take()
            node = self.binary(0)
            self.take(")")
            return node
        if kind == "ident" and value in AGGREGATIONS:
            return self.laid_out(self.aggregate(), start)
        if kind == "ident" and self.peek(1)[1] == "(":
            return self.laid_out(self.call(), start)
        if kind == "ident" or value == "{":
            return self.laid_out(self.selector(), start)
        raise PromQLError(f"unexpected {value or 'end of expression'!r} in {self.text!r}")

    def aggregate(self) -> Aggregate:
        op = self.take()[1]
        grouping: tuple[str, ...] = ()
        without = False
        if self.peek()[1] in ("by", "without"):
            without = self.take()[1] == "without"
            grouping = self.label_list()
        self.take("(")
        param: Node | None = None
        if op in PARAMETRIC:
            param = self.binary(0)
            self.take(",")
        expr = self.binary(0)
        self.take(")")
        if self.peek()[1] in ("by", "without"):
            without = self.take()[1] == "without"
            grouping = self.label_list()
        return Aggregate(op, expr, param, grouping, without)

    def call(self) -> Call:
        func = self.take()[1]
        if func not in (*RANGE_FUNCTIONS, "time", "absent", "vector", "label_replace"):
            raise PromQLError(f"function {func}() is not supported by this evaluator")
        self.take("(")
        args: list[Node] = []
        while self.peek()[1] != ")":
            args.append(self.binary(0))
            if self.peek()[1] == ",":
                self.take()
        self.take(")")
        if func == "time" and args:
            raise PromQLError("time() takes no arguments")
        if func == "absent" and len(args) != 1:
            raise PromQLError("absent() takes one instant vector")
        if func == "vector" and len(args) != 1:
            raise PromQLError("vector() takes one scalar")
        if func == "label_replace" and (
            len(args) != 5 or isinstance(args[0], String) or not all(isinstance(a, String) for a in args[1:])
        ):
            raise PromQLError("label_replace() takes a vector and four strings: dst, replacement, src, regex")
        if func in RANGE_FUNCTIONS and (
            len(args) != 1 or not isinstance(args[0], Selector)
            or (args[0].range_seconds is None and not args[0].range_variable)
        ):
            raise PromQLError(f"{func}() needs one range selector such as metric[5m]")
        return Call(func, tuple(args))

    def selector(self) -> Selector:
        matchers: list[Matcher] = []
        if self.peek()[0] == "ident":
            matchers.append(Matcher("__name__", "=", self.take()[1]))
        if self.peek()[1] == "{":
            self.take()
            while self.peek()[1] != "}":
                kind, name = self.take()
                if kind != "ident":
                    raise PromQLError(f"expected a label name, found {name!r} in {self.text!r}")
                op = self.take()[1]
                if op not in ("=", "!=", "=~", "!~"):
                    raise PromQLError(f"expected a label matcher operator after {name!r}, found {op!r}")
                kind, literal = self.take()
                if kind != "string":
                    raise PromQLError(f"expected a quoted label value after {name}{op}, found {literal!r}")
                matchers.append(Matcher(name, op, unquote(literal)))
                if self.peek()[1] == ",":
                    self.take()
            self.take("}")
        range_seconds, variable = None, ""
        if self.peek()[0] == "duration":
            written = self.take()[1].strip("[] \t\n")
            if written.startswith("$"):
                variable = written
            else:
                range_seconds = parse_duration(written)
        if self.peek()[1] in ("offset", "@"):
            raise PromQLError("offset and @ modifiers are not supported by this evaluator")
        return Selector(tuple(matchers), range_seconds, variable)


def unquote(literal: str) -> str:
    body = literal[1:-1]
    return re.sub(r"\\(.)", lambda m: {"n": "\n", "t": "\t"}.get(m.group(1), m.group(1)), body)


@functools.lru_cache(maxsize=4096)
def parse(text: str) -> Node:
    """The tree of ``text``, the same one for the same text (its nodes are frozen): every evaluation of the
    catalogue (a status page's verdicts, ``diagnose``) resolves it and parses its expressions again."""
    return Parser(text).parse()


# ---------------------------------------------------------------------------------------------- printing


# Binding strength of the binary operators, for the parentheses a tree built from parts needs.
PRECEDENCE = {"or": 1, "and": 2, "unless": 2, **dict.fromkeys(COMPARISONS, 3), "+": 4, "-": 4, "*": 5, "/": 5,
              "%": 5, "^": 6}


def children(node: Node) -> tuple[Node, ...]:
    """The sub-expressions of ``node``, in the order they are written."""
    if isinstance(node, Binary):
        return node.lhs, node.rhs
    if isinstance(node, Aggregate):
        return (node.expr,) if node.param is None else (node.param, node.expr)
    if isinstance(node, Call):
        return node.args
    if isinstance(node, Negate):
        return (node.expr,)
    return ()


def _with_children(node: Node, kids: tuple[Node, ...]) -> Node:
    """``node`` over ``kids`` instead of its children (its layout kept: only its children changed)."""
    if isinstance(node, Binary):
        return dataclasses.replace(node, lhs=kids[0], rhs=kids[1])
    if isinstance(node, Aggregate):
        return dataclasses.replace(node, expr=kids[-1], param=kids[0] if node.param is not None else None)
    if isinstance(node, Call):
        return dataclasses.replace(node, args=kids)
    if isinstance(node, Negate):
        return dataclasses.replace(node, expr=kids[0])
    return node


def transform(node: Node, change: Callable[[Node], Node | None]) -> Node:
    """``node`` with every sub-expression for which ``change`` returns a node replaced by it (top down: what
    replaces a node is not walked again); None keeps a node, and its children are walked."""
    replaced = change(node)
    if replaced is not None:
        return replaced
    kids = children(node)
    if not kids:
        return node
    walked = tuple(transform(kid, change) for kid in kids)
    return node if all(a is b for a, b in zip(walked, kids, strict=True)) else _with_children(node, walked)


def unparse(node: Node) -> str:
    """PromQL text of ``node``. A parsed node is printed as it was written, its children printed in their places;
    a node built from parts (a transform's) is spelled canonically, in parentheses where it stands in for an
    operand of a parsed expression and is not an atom (the parsed text's precedence does not know it)."""
    if node.layout is None:
        return _canonical(node)
    out = [node.layout[0]]
    for kid, gap in zip(children(node), node.layout[1:], strict=True):
        text = unparse(kid)
        out += [f"({text})" if kid.layout is None and isinstance(kid, Binary | Negate) else text, gap]
    return "".join(out)


def quote(value: str) -> str:
    """A label value or string argument as a PromQL double-quoted string."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t")
    return f'"{escaped}"'


def format_duration(seconds: float) -> str:
    """300.0 → ``5m``; 90.0 → ``1m30s`` (Prometheus' spelling: the largest units first)."""
    units = sorted(DURATION_UNITS.items(), key=lambda item: -item[1])
    left, parts = round(seconds * 1000), []
    for unit, size in units:
        count, left = divmod(left, round(size * 1000))
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts) or "0s"


def _number(value: float) -> str:
    value = float(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return str(int(value)) if value.is_integer() and abs(value) < 1e15 else repr(value)


def _operand(node: Node, parent: str, right: bool) -> str:
    """``node`` as an operand of ``parent``, in parentheses where it binds less tightly (or as tightly, on the
    side the operator does not associate to: the right of all but ``^``, the left of ``^``)."""
    text = unparse(node)
    if isinstance(node, Binary):
        inner, outer = PRECEDENCE[node.op], PRECEDENCE[parent]
        if inner < outer or (inner == outer and right != (parent == "^")):
            return f"({text})"
    return text


def _canonical(node: Node) -> str:
    if isinstance(node, Selector):
        name = next((m for m in node.matchers if m.name == "__name__" and m.op == "="), None)
        rest = [m for m in node.matchers if m is not name]
        text = name.value if name is not None else ""
        if rest or name is None:
            text += "{" + ", ".join(f"{m.name}{m.op}{quote(m.value)}" for m in rest) + "}"
        if node.range_variable or node.range_seconds is not None:
            text += f"[{node.range_variable or format_duration(node.range_seconds or 0.0)}]"
        return text
    if isinstance(node, Number):
        return _number(node.value)
    if isinstance(node, String):
        return quote(node.value)
    if isinstance(node, Call):
        return f"{node.func}({', '.join(unparse(a) for a in node.args)})"
    if isinstance(node, Aggregate):
        grouping = f" {'without' if node.without else 'by'} ({', '.join(node.grouping)})" \
            if node.grouping or node.without else ""
        param = "" if node.param is None else unparse(node.param) + ", "
        return f"{node.op}{grouping} ({param}{unparse(node.expr)})"
    if isinstance(node, Negate):
        inner = unparse(node.expr)
        return f"-({inner})" if isinstance(node.expr, Binary) else f"-{inner}"
    modifiers = " bool" if node.return_bool else ""
    if node.on is not None:
        modifiers += f" on ({', '.join(node.on)})"
    elif node.ignoring:
        modifiers += f" ignoring ({', '.join(node.ignoring)})"
    if node.group_left is not None:
        modifiers += f" group_left ({', '.join(node.group_left)})"
    return f"{_operand(node.lhs, node.op, False)} {node.op}{modifiers} {_operand(node.rhs, node.op, True)}"


# ---------------------------------------------------------------------------------------------- evaluation


def evaluate(expr: str | Node, store: SeriesStore, at: float) -> Value:
    """Instant query of ``expr`` at time ``at`` (seconds) over ``store``: a scalar or a vector."""
    node = parse(expr) if isinstance(expr, str) else expr
    return Evaluator(store, at).eval(node)


def _without_name(labels: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in labels.items() if k != "__name__"}


def _signature(labels: Mapping[str, str], on: tuple[str, ...] | None, ignoring: tuple[str, ...]) -> tuple:
    if on is not None:
        return tuple((name, labels.get(name, "")) for name in sorted(on))
    return tuple(sorted((k, v) for k, v in labels.items() if k != "__name__" and k not in ignoring))


def _arith(op: str, a: float, b: float) -> float:
    try:
        if op == "+":
            return a + b
        if op == "-":
            return a - b
        if op == "*":
            return a * b
        if op == "/":
            return a / b
        if op == "%":
            return math.fmod(a, b)
        power = a**b
        return power if isinstance(power, float) else math.nan  # a negative base, a fractional exponent: complex
    except ZeroDivisionError:
        if op == "^":  # zero to a negative power: Go's math.Pow
            return math.copysign(math.inf, a) if b.is_integer() and b % 2 else math.inf
        if op == "%" or a == 0 or math.isnan(a):
            return math.nan
        return math.copysign(math.inf, a) * math.copysign(1.0, b)
    except ValueError:  # fmod of an infinity or by zero: NaN, as Go's math.Mod
        return math.nan
    except OverflowError:
        return math.inf


_COMPARE: dict[str, Callable[[float, float], bool]] = {
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
    ">": lambda a, b: a > b,
    "<": lambda a, b: a < b,
    ">=": lambda a, b: a >= b,
    "<=": lambda a, b: a <= b,
}


def _slope(times: Sequence[float], values: Sequence[float]) -> float | None:
    """Prometheus' ``deriv``: the least-squares slope, per second, of a gauge's samples (None below two)."""
    if len(times) < 2:
        return None
    mean_t, mean_v = sum(times) / len(times), sum(values) / len(values)
    spread = sum((t - mean_t) ** 2 for t in times)
    if spread == 0:
        return None
    return sum((t - mean_t) * (v - mean_v) for t, v in zip(times, values, strict=True)) / spread


def _extrapolated_rate(times: list[float], values: list[float], start: float, end: float,
                       range_seconds: float, is_rate: bool) -> float | None:
    """Prometheus' extrapolatedRate for counters: reset-aware, extrapolated to the window edges."""
    if len(times) < 2:
        return None
    result = values[-1] - values[0]
    last = 0.0
    for value in values:
        if value < last:
            result += last
        last = value
    to_start = times[0] - start
    to_end = end - times[-1]
    sampled = times[-1] - times[0]
    average = sampled / (len(times) - 1)
    if result > 0 and values[0] >= 0:
        # A counter does not extrapolate below zero: it probably started inside the window.
        to_start = min(to_start, sampled * (values[0] / result))
    threshold = average * 1.1
    interval = sampled
    interval += to_start if to_start < threshold else average / 2
    interval += to_end if to_end < threshold else average / 2
    result *= interval / sampled
    return result / range_seconds if is_rate else result


class Evaluator:
    def __init__(self, store: SeriesStore, at: float) -> None:
        self.store = store
        self.at = at

    def eval(self, node: Node) -> Value:
        if isinstance(node, Number):
            return node.value
        if isinstance(node, String):
            raise PromQLError(f"a string ({node.value!r}) is only allowed as an argument of label_replace()")
        if isinstance(node, Negate):
            inner = self.eval(node.expr)
            if isinstance(inner, float):
                return -inner
            return [Sample(_without_name(s.labels), -s.value) for s in inner]
        if isinstance(node, Selector):
            if node.range_seconds is not None or node.range_variable:
                raise PromQLError("a range selector needs a function such as rate() around it")
            return self.instant(node)
        if isinstance(node, Call):
            return self.call(node)
        if isinstance(node, Aggregate):
            return self.aggregate(node)
        return self.binary(node)

    def _select(self, selector: Selector) -> Iterable[tuple[SeriesKey, dict[str, str], list[float], list[float]]]:
        name = next((m.value for m in selector.matchers if m.name == "__name__" and m.op == "="), None)
        for key, times, values in self.store.keyed(name):
            labels = dict(key)
            if all(m.matches(labels) for m in selector.matchers):
                yield key, labels, times, values

    def instant(self, selector: Selector) -> Vector:
        out: Vector = []
        for key, labels, times, values in self._select(selector):
            index = bisect.bisect_right(times, self.at) - 1
            if index >= 0 and times[index] >= self.at - LOOKBACK_SECONDS \
                    and not self.store.ended(key, times[index], self.at):
                out.append(Sample(labels, values[index]))
        return out

    def call(self, node: Call) -> Value:
        if node.func == "time":
            return self.at
        if node.func == "absent":
            return self.absent(node.args[0])
        if node.func == "vector":
            scalar = self.eval(node.args[0])
            if not isinstance(scalar, float):
                raise PromQLError("vector() needs a scalar")
            return [Sample({}, scalar)]
        if node.func == "label_replace":
            return self.label_replace(node)
        selector = node.args[0]
        assert isinstance(selector, Selector)
        if selector.range_seconds is None:
            raise PromQLError(f"the range [{selector.range_variable}] is a dashboard's variable: fill it in first")
        start = self.at - selector.range_seconds
        out: Vector = []
        for _, labels, times, values in self._select(selector):
            lo = bisect.bisect_left(times, start)
            hi = bisect.bisect_right(times, self.at)
            window_t, window_v = times[lo:hi], values[lo:hi]
            if not window_t:
                continue
            result: float | None
            if node.func in ("rate", "increase"):
                result = _extrapolated_rate(window_t, window_v, start, self.at, selector.range_seconds,
                                            node.func == "rate")
            elif node.func == "deriv":
                result = _slope(window_t, window_v)
            elif node.func == "avg_over_time":
                result = sum(window_v) / len(window_v)
            elif node.func == "max_over_time":
                result = max(window_v)
            else:
                result = min(window_v)
            if result is not None:
                out.append(Sample(_without_name(labels), result))
        return out

    def label_replace(self, node: Call) -> Vector:
        """Prometheus' label_replace: where ``regex`` matches all of ``src``'s value, ``dst`` becomes the
        expanded replacement (an empty result removes it); other samples pass unchanged."""
        inner = self.eval(node.args[0])
        if isinstance(inner, float):
            raise PromQLError("label_replace() needs an instant vector")
        dst, replacement, src, regex = (a.value for a in node.args[1:] if isinstance(a, String))
        try:
            pattern = re.compile(f"^(?:{regex})$")
        except re.error as err:
            raise PromQLError(f"label_replace(): invalid regex {regex!r}: {err}") from None
        template = re.sub(r"\$(\d+)|\$\{(\d+)\}", lambda m: "\\g<" + (m.group(1) or m.group(2)) + ">", replacement)
        out: Vector = []
        for sample in inner:
            labels = dict(sample.labels)
            match = pattern.match(labels.get(src, ""))
            if match:
                value = match.expand(template)
                if value:
                    labels[dst] = value
                else:
                    labels.pop(dst, None)
            out.append(Sample(labels, sample.value))
        return out

    def absent(self, node: Node) -> Vector:
        """One sample of value 1 when ``node`` selects nothing; its labels are the selector's equality
        matchers (``absent(up{job="x"})`` → ``{job="x"}``), none for any other expression, as in Prometheus."""
        inner = self.eval(node)
        if isinstance(inner, float):
            raise PromQLError("absent() needs an instant vector, got a scalar")
        if inner:
            return []
        labels: dict[str, str] = {}
        if isinstance(node, Selector):
            for matcher in node.matchers:
                if matcher.op == "=" and matcher.name != "__name__":
                    labels[matcher.name] = matcher.value
        return [Sample(labels, 1.0)]

    def aggregate(self, node: Aggregate) -> Vector:
        inner = self.eval(node.expr)
        if isinstance(inner, float):
            raise PromQLError(f"{node.op}() needs a vector, got a scalar")
        param = self.eval(node.param) if node.param is not None else None
        groups: dict[tuple, tuple[dict[str, str], list]] = {}
        selecting = node.op in SELECTING
        for sample in inner:
            if node.without:
                key_labels = {k: v for k, v in sample.labels.items()
                              if k != "__name__" and k not in node.grouping}
            else:
                key_labels = {k: sample.labels[k] for k in node.grouping if sample.labels.get(k, "") != ""}
            key = tuple(sorted(key_labels.items()))
            groups.setdefault(key, (key_labels, []))[1].append(sample if selecting else sample.value)
        if node.op in SELECTING:
            return self.select_ranked(node, param, [members for _, members in groups.values()])
        out: Vector = []
        for key_labels, values in groups.values():
            if node.op == "sum":
                value = math.fsum(values)
            elif node.op == "avg":
                value = math.fsum(values) / len(values)
            elif node.op == "count":
                value = float(len(values))
            elif node.op == "group":
                value = 1.0
            elif node.op == "max":
                value = max((v for v in values if not math.isnan(v)), default=math.nan)
            elif node.op == "min":
                value = min((v for v in values if not math.isnan(v)), default=math.nan)
            else:
                if not isinstance(param, float):
                    raise PromQLError("quantile() needs a scalar first argument")
                value = _quantile(param, values)
            out.append(Sample(key_labels, value))
        return out

    @staticmethod
    def select_ranked(node: Aggregate, param: Value | None, groups: list[list[Sample]]) -> Vector:
        """topk and bottomk: the ``param`` largest (smallest) samples of each group, their labels whole (the
        name too). As in Prometheus: k truncated to an integer, none below 1, an error where it is no integer
        at all (NaN, infinite); a NaN ranks after every number either way, so it is chosen only where the group
        has fewer than k others."""
        if not isinstance(param, float) or not math.isfinite(param):
            raise PromQLError(f"{node.op}() needs a finite scalar first argument")
        k = int(param)
        if k < 1:
            return []
        sign = -1.0 if node.op == "topk" else 1.0
        out: Vector = []
        for members in groups:
            ranked = sorted(members, key=lambda s: (math.isnan(s.value), 0.0 if math.isnan(s.value)
                                                    else sign * s.value))
            out += [Sample(dict(s.labels), s.value) for s in ranked[:k]]
        return out

    def binary(self, node: Binary) -> Value:
        lhs = self.eval(node.lhs)
        rhs = self.eval(node.rhs)
        op = node.op
        if op in ("and", "or", "unless"):
            if isinstance(lhs, float) or isinstance(rhs, float):
                raise PromQLError(f"'{op}' needs vectors on both sides")
            return self.set_operation(node, lhs, rhs)
        comparison = op in COMPARISONS
        if isinstance(lhs, float) and isinstance(rhs, float):
            if comparison and not node.return_bool:
                raise PromQLError("comparisons between scalars must use bool")
            return float(_COMPARE[op](lhs, rhs)) if comparison else _arith(op, lhs, rhs)
        if isinstance(lhs, float) or isinstance(rhs, float):
            return self.vector_scalar(node, lhs, rhs)
        return self.vector_vector(node, lhs, rhs)

    def vector_scalar(self, node: Binary, lhs: Value, rhs: Value) -> Vector:
        swapped = isinstance(lhs, float)
        vector = rhs if swapped else lhs
        scalar = lhs if swapped else rhs
        assert isinstance(vector, list) and isinstance(scalar, float)
        out: Vector = []
        for sample in vector:
            a, b = (scalar, sample.value) if swapped else (sample.value, scalar)
            labels = sample.labels
            if node.op in COMPARISONS:
                keep = _COMPARE[node.op](a, b)
                if node.return_bool:
                    out.append(Sample(_without_name(labels), float(keep)))
                elif keep:
                    out.append(Sample(dict(labels), sample.value))
            else:
                out.append(Sample(_without_name(labels), _arith(node.op, a, b)))
        return out

    def vector_vector(self, node: Binary, lhs: Vector, rhs: Vector) -> Vector:
        right: dict[tuple, Sample] = {}
        for sample in rhs:
            sig = _signature(sample.labels, node.on, node.ignoring)
            if sig in right:
                raise PromQLError(f"found duplicate series for the match group {dict(sig)} on the right hand-side "
                                  f"of '{node.op}'")
            right[sig] = sample
        seen: set[tuple] = set()
        out: Vector = []
        comparison = node.op in COMPARISONS
        for sample in lhs:
            sig = _signature(sample.labels, node.on, node.ignoring)
            match = right.get(sig)
            if match is None:
                continue
            if node.group_left is None:
                if sig in seen:
                    raise PromQLError(f"many-to-one matching must be explicit (group_left) for '{node.op}': "
                                      f"{dict(sig)}")
                seen.add(sig)
            if comparison:
                keep = _COMPARE[node.op](sample.value, match.value)
                if not keep and not node.return_bool:
                    continue
                value = float(keep) if node.return_bool else sample.value
            else:
                value = _arith(node.op, sample.value, match.value)
            labels = dict(sample.labels)
            if not comparison or node.return_bool:
                labels.pop("__name__", None)
            if node.group_left is None:
                if node.on is not None:
                    labels = {k: v for k, v in labels.items() if k in node.on}
                else:
                    labels = {k: v for k, v in labels.items() if k not in node.ignoring}
            else:
                for name in node.group_left:
                    if match.labels.get(name, ""):
                        labels[name] = match.labels[name]
                    else:
                        labels.pop(name, None)
            out.append(Sample(labels, value))
        return out

    def set_operation(self, node: Binary, lhs: Vector, rhs: Vector) -> Vector:
        right = {_signature(s.labels, node.on, node.ignoring) for s in rhs}
        if node.op == "and":
            return [s for s in lhs if _signature(s.labels, node.on, node.ignoring) in right]
        if node.op == "unless":
            return [s for s in lhs if _signature(s.labels, node.on, node.ignoring) not in right]
        left = {_signature(s.labels, node.on, node.ignoring) for s in lhs}
        return [*lhs, *(s for s in rhs if _signature(s.labels, node.on, node.ignoring) not in left)]


def _quantile(q: float, values: list[float]) -> float:
    if math.isnan(q) or not values:
        return math.nan
    if q < 0:
        return -math.inf
    if q > 1:
        return math.inf
    ordered = sorted(values)
    rank = q * (len(ordered) - 1)
    lower = max(0, math.floor(rank))
    upper = min(len(ordered) - 1, lower + 1)
    weight = rank - math.floor(rank)
    return ordered[lower] * (1 - weight) + ordered[upper] * weight


# ---------------------------------------------------------------------------------------------- labels


def output_labels(node: Node, selected: Callable[[Selector], frozenset[str]]) -> frozenset[str]:
    """The label names a sample of ``node``'s result may carry (``__name__`` aside), when each selector's series
    carry ``selected(selector)``: an upper bound, by Prometheus' rules of which labels each construct keeps.
    ``selected`` returning just ``{name}`` asks whether label ``name`` survives to the result at all."""
    if isinstance(node, Selector):
        return selected(node) - {"__name__"}
    if isinstance(node, Number | String):
        return frozenset()
    if isinstance(node, Negate):
        return output_labels(node.expr, selected)
    if isinstance(node, Call):
        if node.func in ("time", "vector"):
            return frozenset()
        if node.func == "absent":  # its sample's labels are the selector's equality matchers
            arg = node.args[0]
            return frozenset(m.name for m in arg.matchers if m.op == "=" and m.name != "__name__") \
                if isinstance(arg, Selector) else frozenset()
        inner = output_labels(node.args[0], selected)
        if node.func == "label_replace":
            dst = node.args[1]
            return inner | {dst.value} if isinstance(dst, String) else inner
        return inner
    if isinstance(node, Aggregate):
        inner = output_labels(node.expr, selected)
        if node.op in SELECTING:
            return inner
        return inner - set(node.grouping) if node.without else inner & set(node.grouping)
    lhs, rhs = output_labels(node.lhs, selected), output_labels(node.rhs, selected)
    if node.op == "or":
        return lhs | rhs
    if node.op in ("and", "unless"):
        return lhs
    if _is_scalar(node.lhs):
        return rhs
    if _is_scalar(node.rhs):
        return lhs
    if node.group_left is not None:  # many-to-one: the many side's labels, plus those it copies from the one
        return lhs | (rhs & set(node.group_left))
    return lhs & set(node.on) if node.on is not None else lhs - set(node.ignoring)


def _is_scalar(node: Node) -> bool:
    if isinstance(node, Number) or (isinstance(node, Call) and node.func == "time"):
        return True
    if isinstance(node, Negate):
        return _is_scalar(node.expr)
    return isinstance(node, Binary) and _is_scalar(node.lhs) and _is_scalar(node.rhs)


def carries(node: Node, label: str) -> bool:
    """Whether ``label``, where the series ``node`` reads carry it, may reach its result."""
    return label in output_labels(node, lambda _: frozenset({label}))


def crosses(node: Node, label: str) -> bool:
    """Whether evaluating ``node`` may combine series whose ``label`` differs (an aggregation that drops it, a
    join that does not match on it), so that it needs every value of ``label`` in one evaluator; ``absent()``
    looks at every series. A join with a side that does not carry ``label`` (a constant table) crosses nothing.
    topk and bottomk keep every label, yet rank the samples of a group against each other: they cross where
    their grouping does not keep ``label``."""
    if isinstance(node, Aggregate) and carries(node.expr, label):
        if node.op in SELECTING:
            kept = (label not in node.grouping) if node.without else (label in node.grouping)
        else:
            kept = carries(node, label)
        if not kept:
            return True
    if isinstance(node, Call) and node.func == "absent":
        return True
    if isinstance(node, Binary) and not (_is_scalar(node.lhs) or _is_scalar(node.rhs)) \
            and carries(node.lhs, label) and carries(node.rhs, label):
        matched = label in node.on if node.on is not None else label not in node.ignoring
        if not matched:
            return True
    return any(crosses(kid, label) for kid in children(node))


def keep_label(node: Node, label: str) -> Node:
    """``node`` with ``label`` kept through every aggregation and matched in every join whose sides both carry
    it: ``by (instance)`` becomes ``by (label, instance)``, ``on (instance)`` ``on (label, instance)``, an
    aggregation with no clause ``by (label)``. Where no series carries ``label`` the result is the same; where
    they do (one ruler over several clusters), series of different values of it are never combined. A ``without``
    or ``ignoring`` that names ``label`` is an error: it would drop what this keeps. Printed as written, but
    for the clauses it changed."""
    kids = tuple(keep_label(kid, label) for kid in children(node))
    if kids and not all(a is b for a, b in zip(kids, children(node), strict=True)):
        node = _with_children(node, kids)
    if isinstance(node, Aggregate):
        if node.without:
            if label in node.grouping:
                raise PromQLError(f"{node.op} without ({', '.join(node.grouping)}) drops {label}, which must be kept")
            return node
        if label in node.grouping or not carries(node.expr, label):
            return node
        return _regrouped(node, (label, *node.grouping), "by")
    if isinstance(node, Binary):
        if label in node.ignoring:
            raise PromQLError(f"{node.op} ignoring ({', '.join(node.ignoring)}) does not match on {label}")
        if node.on is None or label in node.on or not (carries(node.lhs, label) and carries(node.rhs, label)):
            return node
        return _regrouped(node, (label, *node.on), "on")
    return node


def _regrouped(node: Aggregate | Binary, labels: tuple[str, ...], keyword: str) -> Node:
    """``node`` grouping (``by``) or matching (``on``) on ``labels``, its layout respelled where the clause was
    written (or, for an aggregation written with none, after its operator)."""
    built: Node = dataclasses.replace(node, grouping=labels) if isinstance(node, Aggregate) \
        else dataclasses.replace(node, on=labels)
    if node.layout is None:
        return built
    clause = f"{keyword} ({', '.join(labels)})"
    gaps = list(node.layout)
    for index, gap in enumerate(gaps):
        tokens = list(_tokens(gap))
        for at, (kind, text, start, _) in enumerate(tokens):
            if kind == "ident" and text == keyword and at + 1 < len(tokens) and tokens[at + 1][1] == "(":
                close = next(t for t in tokens[at + 1:] if t[1] == ")")
                gaps[index] = gap[:start] + clause + gap[close[3]:]
                return dataclasses.replace(built, layout=tuple(gaps))
    assert isinstance(node, Aggregate)  # a join's on () is always written: only an aggregation lacks its clause
    for kind, text, _, end in _tokens(gaps[0]):
        if kind == "ident" and text == node.op:
            gaps[0] = gaps[0][:end] + f" {clause} " + gaps[0][end:].lstrip()
            return dataclasses.replace(built, layout=tuple(gaps))
    return dataclasses.replace(built, layout=None)


def _tokens(text: str) -> Iterable[tuple[str, str, int, int]]:
    """The PromQL tokens of a piece of a node's layout (the text between its children): kind, text, offsets."""
    pos = 0
    while pos < len(text) and text[pos:].strip():
        match = TOKEN.match(text, pos)
        if match is None:
            return
        kind = match.lastgroup or ""
        yield kind, match.group(kind), match.start(kind), match.end(kind)
        pos = match.end()
