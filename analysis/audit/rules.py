"""Gate rules over an audit's rows (``biasim gate --rule``, a study's ``gates:``).

A rule is one comparison, read by a tokenizer and a fixed grammar, never by ``eval``::

    rule   := field op value
    field  := name ("." name)*        impact_ratio.ci_high -> column impact_ratio_ci_high
    op     := ">=" | "<=" | ">" | "<" | "==" | "!="
    value  := number | "true" | "false"

A rule holds when it holds on every row of every audit table that has the field. A row whose
value is missing (an excluded category, no test where applicants repeat) is not checked and is
counted; a rule that could check no row fails, since it showed nothing.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

#: The most characters of one rule.
MAX_RULE_CHARS = 200

OPERATORS: dict[str, Callable[[Any, Any], bool]] = {
    ">=": operator.ge,
    "<=": operator.le,
    ">": operator.gt,
    "<": operator.lt,
    "==": operator.eq,
    "!=": operator.ne,
}
_TOKEN = re.compile(
    r"\s*(?:(?P<op>[<>=!]+)|(?P<number>[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?(?![\w.]))"
    r"|(?P<name>[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)|(?P<bad>\S+))"
)
_BOOLEANS = {"true": True, "false": False}


class RuleError(ValueError):
    """A rule that does not parse, or names no field of the audit."""

    def __init__(self, rule: str, token: str, reason: str) -> None:
        super().__init__(f"rule `{rule}`: {reason} at `{token}`")
        self.rule = rule
        self.token = token


@dataclass(frozen=True)
class Rule:
    """One parsed rule: ``column op value`` (the field's dots read as underscores)."""

    text: str
    field: str
    op: str
    value: float | bool

    @property
    def column(self) -> str:
        return self.field.replace(".", "_")


def _tokens(rule: str) -> list[tuple[str, str]]:
    found = []
    for match in _TOKEN.finditer(rule):
        kind = match.lastgroup or "bad"
        found.append((kind, match.group(kind)))
    return found


def parse_rule(rule: str) -> Rule:
    """The rule read by the grammar above.

    Raises:
        RuleError: Naming the rule and the token where it stops making sense.
    """
    text = " ".join(str(rule).split())
    if not text:
        raise RuleError(str(rule), "", "empty rule; write e.g. `impact_ratio.ci_high >= 0.8`")
    if len(text) > MAX_RULE_CHARS:
        raise RuleError(text[:40] + "...", text[:40], f"longer than {MAX_RULE_CHARS} characters")
    tokens = _tokens(text)
    expected = ("name", "op", "value")
    for i, want in enumerate(expected):
        if i >= len(tokens):
            raise RuleError(text, text.split()[-1], f"the rule ends where {_WHAT[want]} should be")
        kind, token = tokens[i]
        ok = kind == want or (want == "value" and (kind == "number" or token in _BOOLEANS))
        ok = ok and (want != "op" or token in OPERATORS)
        if not ok:
            raise RuleError(text, token, f"expected {_WHAT[want]}")
    if len(tokens) > 3:
        raise RuleError(text, tokens[3][1], "one comparison per rule; give another --rule")
    (_, field), (_, op), (kind, value) = tokens
    parsed = float(value) if kind == "number" else _BOOLEANS[value]
    if isinstance(parsed, float) and not math.isfinite(parsed):
        raise RuleError(text, value, "not a finite number")
    return Rule(text, field, op, parsed)


_WHAT = {
    "name": "a field (e.g. impact_ratio.ci_high)",
    "op": "a comparison (>=, <=, >, <, ==, !=)",
    "value": "a number, true or false",
}


@dataclass(frozen=True)
class RuleResult:
    """A rule evaluated on an audit's tables.

    Attributes:
        rule: The rule.
        passed: Whether it held on every row checked, and at least one row was checked.
        checked: Rows checked.
        missing: Rows of tables with the field whose value is missing (not checked).
        failures: ``(table, row label, value)`` of each row where it does not hold.
    """

    rule: Rule
    passed: bool
    checked: int
    missing: int
    failures: tuple[tuple[str, str, Any], ...]


def evaluate(
    rule: Rule, tables: Mapping[str, Sequence[Mapping[str, Any]]], labels: Sequence[str]
) -> RuleResult:
    """``rule`` over every row of ``tables`` (records by table key); ``labels`` are the columns
    that name a row in a failure (categories and strata).

    Raises:
        RuleError: No table has the field (naming the fields there are).
    """
    having = {key: rows for key, rows in tables.items() if rows and rule.column in rows[0]}
    if not having:
        known = sorted({c for rows in tables.values() for c in (rows[0] if rows else {})})
        raise RuleError(rule.text, rule.field, f"no such field; fields: {', '.join(known)}")
    checked, missing, failures = 0, 0, []
    for key, rows in having.items():
        for row in rows:
            value = row[rule.column]
            if value is None or (isinstance(value, float) and math.isnan(value)):
                missing += 1
                continue
            if isinstance(value, str):
                raise RuleError(rule.text, rule.field, "the field holds text, not numbers")
            checked += 1
            if not OPERATORS[rule.op](value, rule.value):
                label = " x ".join(str(row[c]) for c in labels if c in row)
                failures.append((key, label, value))
    return RuleResult(rule, checked > 0 and not failures, checked, missing, tuple(failures))
