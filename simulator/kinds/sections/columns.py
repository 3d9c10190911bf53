"""Columns several declared tables share, each declared once: a group's value headed by its
group column, a rate with its 95% interval, a test's p-value, its adjustment across a family
and its unit, the impact ratio with the four-fifths rule, and a market's cycle, group,
replicate markets and t interval over them (``market``, ``market_effects``). Each function
takes only what really differs between the tables (the key, the header, what the value is
there), so the same concept has one header, format and schema description wherever a table
shows it."""

from __future__ import annotations

from biasim.simulator.common.html import Column


def group_value(label: str = "{key}") -> Column:
    """The group's value (``value``), headed by the group column's name (``{key}``: the key
    of a table per group column)."""
    return Column("value", label, description="The group's value.")


def contrast(vs: str = "reference") -> tuple[Column, Column]:
    """The group a row compares (``group``) and the reference group (``reference``), headed
    ``vs`` (a model's estimates and its grades)."""
    return (
        Column("group", "group", description="The group compared."),
        Column("reference", vs, description="The reference group."),
    )


def interval(
    low: str, high: str, how: str = "", *, label: str = "95% CI", required: bool = True
) -> Column:
    """A 95% interval from ``low`` to ``high``, drawn ``how``."""
    return Column(low, label, "ci", upper=high, description=how, required=required)


def rate(
    what: str, how: str, *, key: str = "rate", label: str = "rate", bounds: str = "ci"
) -> tuple[Column, Column]:
    """A rate or share (``key``: ``what`` it counts) and its 95% interval (drawn ``how``),
    whose bounds are ``<bounds>_low`` and ``<bounds>_high``."""
    return (
        Column(key, label, ".3f", description=what),
        interval(f"{bounds}_low", f"{bounds}_high", how),
    )


def p_value(how: str, label: str = "p") -> Column:
    """A test's p-value (``p_value``): ``how`` says the test."""
    return Column("p_value", label, "p", description=how)


def p_adjusted(across: str, label: str = "p ({adjust})", *, by: str = "Adjusted") -> Column:
    """The p-value adjusted (``by`` the result's ``adjust`` unless named) across ``across``."""
    return Column("p_adjusted", label, "p", description=f"{by} across {across}.")


def unit_of_test(what: str = "The test's unit.") -> Column:
    """The unit a test's null exchanges (``unit``)."""
    return Column("unit", "unit", description=what)


def unit_count(label: str = "units", what: str = "How many.") -> Column:
    """How many of the test's units there are (``n_units``)."""
    return Column("n_units", label, "int", description=what)


def impact_ratio() -> Column:
    """The impact ratio: a group's rate over the highest group's."""
    return Column("impact_ratio", "IR", ".3f", description="Rate / the highest group's rate.")


def below_four_fifths() -> Column:
    """Whether the impact ratio is below the four-fifths rule's 0.8."""
    return Column("four_fifths", "below 4/5", "bool", description="Impact ratio below 0.8.")


def group(what: str = "The group.") -> Column:
    """The group a row is of (``group``), by its label."""
    return Column("group", "group", description=what)


def reason(what: str = "Why.") -> Column:
    """Why rows were left out (``reason``), in a table of exclusions."""
    return Column("reason", "reason", description=what)


def share_test() -> tuple[Column, ...]:
    """A share's exact test against chance, its adjustment across the items, whether the
    adjusted p is below ``alpha``, and its unit (the items of ``association`` and ``picks``)."""
    return (
        p_value("Exact test against chance."),
        p_adjusted("the items (`adjust`)", "p adjusted"),
        Column("deviates", "deviates", "bool", description="Adjusted p below `alpha`."),
        unit_of_test("The test's unit (calls)."),
        unit_count(),
    )


def dpd_threshold() -> Column:
    """The parity test's threshold: the DPD at which it rejects (``demographic_parity``'s
    cases and ``explicit_bias``'s)."""
    return Column("threshold", "threshold", ".3f", description="95th percentile of DPD, null.")


def significant(what: str = "p below `alpha`.") -> Column:
    """Whether the row's test rejects at ``alpha`` (``significant``)."""
    return Column("significant", "significant", "bool", description=what)


def mean_sd(spec: str = ".2f") -> tuple[Column, Column]:
    """The mean of the scores counted before it (``spec`` its format) and their SD."""
    return (
        Column("mean", "mean", spec, description="Their mean."),
        Column("sd", "sd", ".2f", description="Their SD."),
    )


def dimension() -> Column:
    """The style dimension a letters table is split by (``dimension``)."""
    return Column("dimension", "dimension", description="The style dimension.")


def cycle() -> Column:
    """The cycle of a market (0: the initial workforce, before any hiring)."""
    return Column("cycle", "cycle", "int", description="The cycle (0: the initial workforce).")


def market_group(label: str = "{by}") -> Column:
    """A market's group, headed by the persona axis counted (``{by}``: the result's field)."""
    return Column("group", label, "text", description="The group (a value of `by`).")


def markets(key: str) -> Column:
    """How many replicate markets a row holds: the unit of its interval or test."""
    return Column(key, "markets", "int", description="Replicate markets (the unit).")


def over_markets(low: str, high: str, label: str = "interval") -> Column:
    """A t interval from ``low`` to ``high`` over replicate markets (none with one market)."""
    return Column(
        low,
        label,
        "ci",
        upper=high,
        description="A t interval over replicate markets (None with one market).",
    )
