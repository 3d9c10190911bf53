"""Gate rules: the grammar reads one comparison and nothing else (no eval), names the token
where a rule stops making sense, and a rule holds only on every row it could check."""

from __future__ import annotations

import math

import pytest

from biasim.analysis.audit.rules import Rule, RuleError, evaluate, parse_rule


@pytest.mark.parametrize(
    ("text", "rule"),
    [
        (
            "impact_ratio.ci_high >= 0.8",
            Rule("impact_ratio.ci_high >= 0.8", "impact_ratio.ci_high", ">=", 0.8),
        ),
        ("fisher_p>0.05", Rule("fisher_p>0.05", "fisher_p", ">", 0.05)),
        ("  shortfall   ==  0 ", Rule("shortfall == 0", "shortfall", "==", 0.0)),
        (
            "below_four_fifths != true",
            Rule("below_four_fifths != true", "below_four_fifths", "!=", True),
        ),
        ("two_sd_z > -2e0", Rule("two_sd_z > -2e0", "two_sd_z", ">", -2.0)),
    ],
)
def test_rules_parse(text: str, rule: Rule) -> None:
    assert parse_rule(text) == rule


@pytest.mark.parametrize(
    ("text", "token"),
    [
        ("__import__('os').system('x') > 1", "('os').system('x')"),
        ("impact_ratio >= 0.8 and fisher_p > 0.05", "and"),
        ("impact_ratio => 0.8", "=>"),
        ("impact_ratio >=", ">="),
        ("0.8 <= impact_ratio", "0.8"),
        ("impact_ratio >= ci_low", "ci_low"),
        ("impact_ratio >= 1e999", "1e999"),
        ("", ""),
    ],
)
def test_bad_rules_name_the_rule_and_the_token(text: str, token: str) -> None:
    with pytest.raises(RuleError) as caught:
        parse_rule(text)
    assert caught.value.token == token
    assert f"at `{token}`" in str(caught.value) and str(caught.value).startswith("rule `")


TABLES = {
    "sex": [
        {"sex": "F", "impact_ratio": 0.6, "impact_ratio_ci_high": 0.95, "reference": "M"},
        {"sex": "M", "impact_ratio": 1.0, "impact_ratio_ci_high": 1.0, "reference": "M"},
    ],
    "race_ethnicity": [
        {"race": "A", "impact_ratio": math.nan, "impact_ratio_ci_high": None, "reference": None},
        {"race": "B", "impact_ratio": 1.0, "impact_ratio_ci_high": 1.0, "reference": "B"},
    ],
}


def test_a_rule_holds_on_every_checked_row_and_counts_the_missing() -> None:
    held = evaluate(parse_rule("impact_ratio.ci_high >= 0.8"), TABLES, ["sex", "race"])
    assert held.passed and held.checked == 3 and held.missing == 1 and not held.failures
    broken = evaluate(parse_rule("impact_ratio >= 0.8"), TABLES, ["sex", "race"])
    assert not broken.passed and broken.failures == (("sex", "F", 0.6),)
    boundary = evaluate(parse_rule("impact_ratio >= 0.6"), TABLES, ["sex"])
    assert boundary.passed  # >= includes the bound


def test_a_rule_with_nothing_to_check_fails_and_unknown_fields_are_refused() -> None:
    empty = {"sex": [{"sex": "F", "fisher_p": None}]}
    assert not evaluate(parse_rule("fisher_p > 0.05"), empty, ["sex"]).passed
    with pytest.raises(RuleError, match=r"no such field; fields: .*impact_ratio_ci_high") as caught:
        evaluate(parse_rule("impact_ratio.ci_hi >= 0.8"), TABLES, ["sex"])
    assert caught.value.token == "impact_ratio.ci_hi"
    with pytest.raises(RuleError, match="holds text"):
        evaluate(parse_rule("reference >= 1"), TABLES, ["sex"])
