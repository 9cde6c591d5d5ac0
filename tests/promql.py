"""The metric names a PromQL expression reads: a careful tokenizer, for checking that the
shipped dashboard and alert rules (deploy/) query only metrics the service exports.

No PromQL parser is on PyPI for Python; this reads the language's tokens (strings, numbers
and durations, identifiers, operators, the three kinds of brackets) and tells metric names
from what else an identifier can be: a function or aggregation (followed by `(`), a keyword
(`by`, `on`, `offset`, `bool`...), a label name (inside `{...}`, or in the label list after
`by`, `without`, `on`, `ignoring`, `group_left`, `group_right`), a range or subquery
(`[...]`). A selector `{__name__="x"}` names `x`. Grafana's template variables (`$project`,
`${project}`, `$__rate_interval`) and its `label_values(metric, label)` are understood.
Anything it cannot read is an error, never a silent pass. tests/unit/deploy tests it alone.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_TOKEN = re.compile(
    r"""
    (?P<space>\s+|\#[^\n]*)
  | (?P<string>"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*'|`[^`]*`)
  | (?P<variable>\$\{[^}]*\}|\$\w+)
  | (?P<number>0[xX][0-9a-fA-F]+|(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?(?:(?:ms|[smhdwy])\d*)*)
  | (?P<ident>[a-zA-Z_:][a-zA-Z0-9_:]*)
  | (?P<op>=~|!~|!=|==|<=|>=|[-+*/%^<>=,@])
  | (?P<open>[({\[])
  | (?P<close>[)}\]])
    """,
    re.VERBOSE,
)
_PAIRS = {"(": ")", "{": "}", "[": "]"}
KEYWORDS = frozenset(
    {"and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right"}
    | {"offset", "bool", "inf", "nan"}
)
AGGREGATIONS = frozenset(
    {"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values"}
    | {"bottomk", "topk", "quantile", "limitk", "limit_ratio"}
)
_LABEL_LISTS = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right"})


class PromQLError(ValueError):
    pass


@dataclass(frozen=True)
class Token:
    kind: str
    text: str


def tokens(expr: str) -> list[Token]:
    out, at = [], 0
    while at < len(expr):
        match = _TOKEN.match(expr, at)
        if match is None:
            raise PromQLError(f"cannot read {expr[at : at + 20]!r} in {expr!r}")
        kind = match.lastgroup or ""
        if kind != "space":
            out.append(Token(kind, match.group()))
        at = match.end()
    return out


def metric_names(expr: str) -> set[str]:
    """The metric names `expr` reads. Raises PromQLError on what is not PromQL."""
    toks = tokens(expr)
    names: set[str] = set()
    # Each open bracket: its closing text and what it holds ("labels", "range", "matchers",
    # "call:<function>" with its argument index, or "group").
    stack: list[list[str | int]] = []
    for i, tok in enumerate(toks):
        before = toks[i - 1] if i else None
        after = toks[i + 1] if i + 1 < len(toks) else None
        inner = stack[-1] if stack else None
        if tok.kind == "open":
            stack.append(_opened(tok.text, before))
        elif tok.kind == "close":
            if inner is None or inner[0] != tok.text:
                raise PromQLError(f"unbalanced {tok.text!r} in {expr!r}")
            stack.pop()
        elif tok.kind == "op" and tok.text == "," and inner is not None:
            inner[2] = int(inner[2]) + 1
        elif tok.kind == "ident" and inner is not None and inner[1] == "matchers":
            if tok.text == "__name__" and _names_metric(toks, i):
                names.add(toks[i + 2].text[1:-1])
        elif (
            tok.kind == "ident"
            and (inner is None or inner[1] not in ("labels", "range"))
            and _is_metric(tok, after, inner)
        ):
            names.add(tok.text)
    if stack:
        raise PromQLError(f"unclosed {stack[-1][0]!r} expected in {expr!r}")
    return names


def _opened(text: str, before: Token | None) -> list[str | int]:
    closing = _PAIRS[text]
    if text == "{":
        return [closing, "matchers", 0]
    if text == "[":
        return [closing, "range", 0]
    if before is not None and before.kind == "ident" and before.text in _LABEL_LISTS:
        return [closing, "labels", 0]
    if before is not None and before.kind == "ident":
        return [closing, "call:" + before.text, 0]
    return [closing, "group", 0]


def _names_metric(toks: list[Token], i: int) -> bool:
    return (
        i + 2 < len(toks)
        and toks[i + 1].text == "="
        and toks[i + 2].kind == "string"
        and toks[i + 2].text[0] != "`"
    )


def _is_metric(tok: Token, after: Token | None, inner: list[str | int] | None) -> bool:
    if tok.text in KEYWORDS:
        return False
    if after is not None and after.text == "(":
        return False  # a function or an aggregation
    if tok.text in AGGREGATIONS and after is not None and after.text in ("by", "without"):
        return False  # `sum by (label) (...)`
    # Grafana's label_values(metric, label): the label is not a metric.
    return not (inner is not None and inner[1] == "call:label_values" and int(inner[2]) >= 1)
