"""Paper-style figures (Li, Shirado & Das 2025, Figs. 3, 4 and 5) from the analysis tables.

Every function builds a ``matplotlib.figure.Figure`` directly, without pyplot, so nothing here
needs a display or touches pyplot's global state; a figure is returned for the caller to inspect
and, when a ``path`` is given, also written as PNG. Inputs are plain DataFrames:

* rates: case columns + ``value``, ``n_units``, ``n_valid``, ``n_excluded``, ``k``, ``rate``,
  ``ci_low``, ``ci_high`` (``rate`` = share choosing the targeted decision);
* cases: case columns + ``n_groups``, ``n_valid``, ``n_excluded``, ``pooled_rate``, ``dpd``,
  ``threshold``, ``chance_dpd``, ``p_value``, ``significant``, ``max_group``, ``min_group``;
* implicit/explicit summary: ``model_label`` + ``n_cases_*``, ``mean_dpd_*``, ``sd_dpd_*``,
  ``n_significant_*`` for ``implicit`` and ``explicit``, and ``t_statistic``, ``p_value``, ``df``;
* pipeline stages (``analysis.pipeline.stage_table``): ``stage``, ``group``, ``value``,
  ``entered``, ``advanced``, ``cumulative_rate``.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import tempfile
import textwrap
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib
import numpy as np
import pandas as pd
from matplotlib import rcParams
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.font_manager import FontProperties
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.text import Text
from matplotlib.textpath import TextToPath
from matplotlib.ticker import LogLocator, NullLocator, PercentFormatter

DPI = 150
TARGET_COLOR = "#3b6ea8"
ALTERNATIVE_COLOR = "#d9d9d9"
IMPLICIT_COLOR = "#c0504d"
EXPLICIT_COLOR = "#4f81bd"
SIGNIFICANT_HATCH = "//"
FUNNEL_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
# Line-end labels of a funnel are kept this far apart (axes fraction, about one 9 pt line).
_LABEL_GAP = 0.055
# A DPD bar lower than this (on the 0-1.2 axis, about a point high) is labelled, not drawn.
_VISIBLE_DPD = 0.005
# Percent labels on bar segments narrower than this would overlap the bar edges.
_MIN_LABELLED_SHARE = 0.06
# Percent labels are raised this far (in bar slots) above the interval line through the bar.
_LABEL_RAISE = 0.24
TICK_FONT_SIZE = 9
BANNER_FONT_SIZE = 10
# Tick label lines longer than this many characters are wrapped.
_TICK_WRAP = 16
# Measures text without a renderer, to size a figure before anything is drawn.
_TEXT_PATH = TextToPath()


def dpd_label(dpd: float, significant: bool, threshold: float) -> str:
    """Panel text for one case: ``DPD 0.42* (threshold 0.12)``; the star marks significance.

    A case without a DPD (fewer than two groups answered) reads ``DPD n/a``.
    """
    if math.isnan(dpd):
        return "DPD n/a"
    star = "*" if significant else ""
    return f"DPD {dpd:.2f}{star} (threshold {threshold:.2f})"


def plot_decision_shares(
    rates: pd.DataFrame,
    cases: pd.DataFrame,
    *,
    row_col: str = "attribute",
    col_col: str = "scenario",
    group_col: str = "value",
    targets: Mapping[str, str] | None = None,
    orders: Mapping[str, Sequence[Any]] | None = None,
    title: str | None = None,
    path: str | Path | None = None,
) -> Figure:
    """Fig. 4: the share of each persona group choosing the targeted decision, per case.

    A grid with one row per ``row_col`` value (persona groups such as gender) and one column per
    ``col_col`` value (scenarios). Each panel has one horizontal stacked bar per ``group_col``
    value: the share choosing the target (dark, drawn first) with its Wilson 95% interval as an
    error bar, and the alternative (light), labelled with percentages, and the number of valid
    answers ``n = ...`` right of the bar; a vertical black line at the case's pooled rate; and a
    title naming the scenario and giving ``dpd_label``. The rate axis names the targeted
    decision. A value with excluded answers has ``(n excl.)`` in its tick label. Filter both
    tables to one model and persona condition first.

    Args:
        rates: Rates table (see module docstring).
        cases: Cases table with one row per (``row_col``, ``col_col``) pair.
        row_col: Column giving the grid rows.
        col_col: Column giving the grid columns.
        group_col: Column giving the bars within a panel.
        targets: ``col_col`` value -> name of the targeted decision, for the axis label.
        orders: Column -> its values in the order to draw (the study's declared order, e.g.
            the scenarios and each axis's values as the paper lists them); values not listed
            follow in order of first appearance, and so do all values of a column not given.
        title: Figure title.
        path: When given, the PNG is written there with ``save_figure``.

    Returns:
        The figure; its axes are in row-major order, blank panels switched off.

    Raises:
        ValueError: ``rates`` is empty, or a panel with rates has no case row or more than one.
    """
    if rates.empty:
        raise ValueError("no rates to plot")
    orders = orders or {}
    rates = _sorted(rates, [row_col, col_col, group_col], orders)
    row_values = list(dict.fromkeys(rates[row_col]))
    col_values = list(dict.fromkeys(_sorted(rates, [col_col], orders)[col_col]))
    max_bars = max(rates.groupby([row_col, col_col]).size().max(), 1)
    fig = Figure(
        figsize=(4.6 * len(col_values), (0.45 * max_bars + 1.6) * len(row_values)),
        layout="constrained",
    )
    axes = fig.subplots(len(row_values), len(col_values), squeeze=False)
    for i, row_value in enumerate(row_values):
        for j, col_value in enumerate(col_values):
            ax = axes[i, j]
            panel = rates[(rates[row_col] == row_value) & (rates[col_col] == col_value)]
            if panel.empty:
                ax.set_axis_off()
                continue
            case = cases[(cases[row_col] == row_value) & (cases[col_col] == col_value)]
            if len(case) != 1:
                raise ValueError(
                    f"expected one case row for {row_col}={row_value!r}, {col_col}={col_value!r}, "
                    f"found {len(case)}; filter to one model and persona condition first"
                )
            target = None if targets is None else targets.get(col_value)
            _shares_panel(ax, panel, case.iloc[0], group_col, target)
            ax.set_title(f"{_readable(col_value)}\n{_case_label(case.iloc[0])}", fontsize=9)
            if j == 0:
                ax.set_ylabel(_readable(row_value))
    handles = [
        Patch(facecolor=TARGET_COLOR, label="targeted decision"),
        Patch(facecolor=ALTERNATIVE_COLOR, label="alternative"),
        Line2D([], [], color="black", marker="|", linestyle="-", label="95% Wilson interval"),
        Line2D([], [], color="black", linewidth=1.5, label="pooled rate"),
    ]
    columns = _legend_columns(handles, fig.get_figwidth())
    fig.legend(handles=handles, loc="outside lower center", ncols=columns, frameon=False)
    if title:
        fig.suptitle(title)
    return _finish(fig, path)


def plot_dpd_by_condition(
    cases: pd.DataFrame,
    *,
    condition_col: str = "persona_condition",
    case_cols: Sequence[str] = ("scenario", "attribute"),
    order: Sequence[str] | None = None,
    orders: Mapping[str, Sequence[Any]] | None = None,
    targets: Mapping[str, str] | None = None,
    ylabel: str = "DPD in the rate of the targeted decision",
    title: str | None = None,
    path: str | Path | None = None,
) -> Figure:
    """Fig. 5: the DPD of every case, one bar per persona condition (Figs. 11-12: per model).

    Cases (combinations of ``case_cols``) are grouped along the x axis in the order ``orders``
    gives (else first appearance); within a group, conditions follow ``order`` (default: first
    appearance). Each condition is one bar container labelled with the condition. Significant
    bars are hatched and starred; a case without a DPD reads ``n/a``; the parity threshold of
    each case is a short black tick across its bar. Tick labels are wrapped and the figure is
    made wide enough that they never overlap. Filter to one model first.

    Args:
        cases: Cases table.
        condition_col: Column naming the persona condition.
        case_cols: Columns identifying a case.
        order: Conditions to draw, in this order.
        orders: Case column -> its values in the order to draw (as ``plot_decision_shares``).
        targets: First case column's value -> its targeted decision, shown in the tick label.
        ylabel: The y axis label: what the DPD is a difference of.
        title: Axes title (default ``DPD by <condition_col>``).
        path: When given, the PNG is written there with ``save_figure``.

    Returns:
        The figure, with one axes.

    Raises:
        ValueError: Some case and condition has more than one row.
    """
    keys = list(case_cols)
    if cases.duplicated([*keys, condition_col]).any():
        raise ValueError(f"several rows per case and {condition_col}; filter to one model first")
    cases = _sorted(cases, keys, orders or {})
    conditions = list(order) if order is not None else list(dict.fromkeys(cases[condition_col]))
    case_keys = list(dict.fromkeys(cases[keys].itertuples(index=False, name=None)))
    labels = [_case_tick(key, targets) for key in case_keys]
    width = 0.8 / max(len(conditions), 1)
    # Each case group is as wide as its bars need and its widest tick label line.
    slot = max(0.32 * max(len(conditions), 1) + 0.2, *(_width_in(t) + 0.2 for t in labels))
    fig = Figure(figsize=(max(7.0, 1.4 + slot * len(case_keys)), 5.2), layout="constrained")
    ax = fig.add_subplot()
    position = {key: n for n, key in enumerate(case_keys)}
    for c, condition in enumerate(conditions):
        part = cases[cases[condition_col] == condition]
        x = np.array([position[key] for key in part[keys].itertuples(index=False, name=None)])
        x = x + (c - (len(conditions) - 1) / 2) * width
        significant = part["significant"].astype(bool).to_numpy()
        bars = ax.bar(x, part["dpd"].to_numpy(), width * 0.95, color=f"C{c}", label=str(condition))
        for bar, is_significant in zip(bars, significant, strict=True):
            if math.isnan(bar.get_height()) or abs(bar.get_height()) < _VISIBLE_DPD:
                # No DPD (fewer than two values answered) or one too small to draw: say so
                # instead of an empty slot.
                ax.text(
                    bar.get_x() + bar.get_width() / 2,
                    0.01,
                    "n/a" if math.isnan(bar.get_height()) else f"{bar.get_height():.2g}",
                    rotation=90 if math.isnan(bar.get_height()) else 0,
                    ha="center",
                    va="bottom",
                    fontsize=7,
                )
            elif is_significant:
                bar.set_hatch(SIGNIFICANT_HATCH)
                ax.text(
                    bar.get_x() + bar.get_width() / 2,
                    bar.get_height() + 0.01,
                    "*",
                    ha="center",
                    va="bottom",
                )
        ax.hlines(
            part["threshold"].to_numpy(),
            x - width * 0.45,
            x + width * 0.45,
            colors="black",
            linewidth=1.5,
        )
    ax.set_xticks(range(len(case_keys)), labels, fontsize=TICK_FONT_SIZE)
    ax.set_xlim(-0.5, len(case_keys) - 0.5)
    ax.set_ylabel(ylabel)
    ax.set_ylim(0, 1.2)
    # Explicit handles: a container's own handle would copy its first bar's hatch.
    handles = [Patch(facecolor=f"C{c}", label=_readable(cond)) for c, cond in enumerate(conditions)]
    handles += [
        Patch(facecolor="white", edgecolor="black", hatch=SIGNIFICANT_HATCH, label="significant"),
        Line2D([], [], color="black", linewidth=1.5, label="parity threshold"),
    ]
    columns = _legend_columns(handles, fig.get_figwidth())
    fig.legend(handles=handles, loc="outside lower center", ncols=columns, frameon=False)
    ax.set_title(title or f"DPD by {_readable(condition_col)}")
    _note_no_visible_bar(ax, cases["dpd"].to_numpy(dtype=float))
    return _finish(fig, path)


def _note_no_visible_bar(ax: Axes, dpds: np.ndarray) -> None:
    """When no DPD bar is tall enough to see, say in the axes why the plot looks empty."""
    drawn = dpds[~np.isnan(dpds)]
    if not drawn.size or (np.abs(drawn) >= _VISIBLE_DPD).any():
        return
    note = (
        "no difference in any case: every DPD is 0"
        if (drawn == 0).all()
        else f"every DPD is below {_VISIBLE_DPD}: too small to draw as a bar"
    )
    ax.text(0.5, 0.5, note, transform=ax.transAxes, ha="center", va="center", fontsize=11)


def plot_implicit_explicit(
    summary: pd.DataFrame,
    *,
    model_col: str = "model_label",
    model_order: Sequence[str] | None = None,
    t_test: str = "paper's t-test",
    path: str | Path | None = None,
) -> Figure:
    """Fig. 3: mean DPD over cases, implicit (simulation) against explicit (question), per model.

    Two bar containers, ``implicit`` then ``explicit``, one bar per model with its sd as the
    error bar, each annotated ``k/n`` (significant cases out of cases). Under the model name:
    the beyond-chance test's p-value (``p_excess``, ``analysis.excess``) when the table has it,
    then the paper's two-sample t-test's, labelled as such.

    Args:
        summary: Implicit/explicit summary, one row per model.
        model_col: Column naming the model.
        model_order: Models to draw, in this order (default: table order).
        t_test: What the two-sample t-test is called (the seed paper's, in its own study).
        path: When given, the PNG is written there with ``save_figure``.

    Returns:
        The figure, with one axes.
    """
    table = summary.set_index(model_col)
    models = list(model_order) if model_order is not None else list(table.index)
    table = table.loc[models]
    x = np.arange(len(models))
    width = 0.38
    fig = Figure(figsize=(max(4.0, 1.6 * len(models) + 1.5), 4.5), layout="constrained")
    ax = fig.add_subplot()
    for offset, kind, color in (
        (-0.5, "implicit", IMPLICIT_COLOR),
        (0.5, "explicit", EXPLICIT_COLOR),
    ):
        means = table[f"mean_dpd_{kind}"].to_numpy(dtype=float)
        sds = table[f"sd_dpd_{kind}"].to_numpy(dtype=float)
        bars = ax.bar(
            x + offset * width, means, width, yerr=sds, capsize=4, color=color, label=kind
        )
        counts = zip(table[f"n_significant_{kind}"], table[f"n_cases_{kind}"], strict=True)
        for bar, sd, (k, n) in zip(bars, sds, counts, strict=True):
            top = bar.get_height() + (0 if math.isnan(sd) else sd)
            ax.text(
                bar.get_x() + bar.get_width() / 2,
                top + 0.02,
                f"{int(k)}/{int(n)}",
                ha="center",
                va="bottom",
                fontsize=8,
            )
    if "p_excess" in table.columns:
        # The calibrated test leads; the paper's t-test of raw DPDs, whose chance levels differ
        # between the sides, is named as such.
        ticks = [
            f"{m}\nbeyond chance: {_p_text(pe)}\n{t_test}: {_p_text(p)}"
            for m, pe, p in zip(models, table["p_excess"], table["p_value"], strict=True)
        ]
    else:
        ticks = [f"{m}\n{_p_text(p)}" for m, p in zip(models, table["p_value"], strict=True)]
    ax.set_xticks(x, ticks)
    ax.set_ylabel("mean DPD over cases (± sd)")
    ax.set_ylim(min(0.0, ax.get_ylim()[0]), max(1.1, ax.get_ylim()[1] + 0.1))
    ax.legend(frameon=False)
    ax.set_title("Implicit vs explicit bias\n(k/n = significant cases)")
    return _finish(fig, path)


def plot_rates_by_model(
    rates: pd.DataFrame,
    *,
    group_cols: Sequence[str],
    model_col: str = "model_label",
    order: Sequence[str] | None = None,
    path: str | Path | None = None,
) -> Figure:
    """Acceptance (or decision) rate per group, one bar per model, with Wilson intervals and
    each bar's number of answers written up from its base.

    Args:
        rates: One row per model and group with ``rate``, ``ci_low``, ``ci_high`` and the
            number of answers, ``n`` (or ``n_valid``).
        group_cols: Columns naming a group (joined in the tick label).
        model_col: Column naming the model.
        order: Models to draw, in this order (default: first appearance).
        path: When given, the PNG is written there with ``save_figure``.

    Returns:
        The figure, with one axes and one bar container per model.
    """
    models = list(order) if order is not None else list(dict.fromkeys(rates[model_col]))
    n_col = "n" if "n" in rates else "n_valid"
    labels = rates[list(group_cols)].astype(str).agg(" ".join, axis=1)
    groups = list(dict.fromkeys(labels))
    position = {g: i for i, g in enumerate(groups)}
    width = 0.8 / max(len(models), 1)
    fig = Figure(
        figsize=(max(6.0, 1.5 + 0.3 * len(groups) * max(len(models), 1)), 4.5),
        layout="constrained",
    )
    ax = fig.add_subplot()
    for m, model in enumerate(models):
        mask = (rates[model_col] == model).to_numpy()
        part = rates[mask]
        x = np.array([position[g] for g in labels[mask]]) + (m - (len(models) - 1) / 2) * width
        rate = part["rate"].to_numpy(dtype=float)
        errors = _interval_errors(part)
        bars = ax.bar(
            x, rate, width * 0.95, yerr=errors, capsize=3, color=f"C{m}", label=str(model)
        )
        for bar, n in zip(bars, part[n_col], strict=True):
            ax.text(
                bar.get_x() + bar.get_width() / 2,
                0.01,
                f"n={int(n)}",
                rotation=90,
                ha="center",
                va="bottom",
                fontsize=7,
                color="white",
            )
    ax.set_xticks(range(len(groups)), groups, rotation=30, ha="right")
    ax.set_ylim(0, 1.05)
    ax.yaxis.set_major_formatter(PercentFormatter(xmax=1))
    ax.set_ylabel("rate (95% Wilson interval)")
    ax.legend(frameon=False, ncols=min(len(models), 4))
    ax.set_title("Rate per group and model")
    return _finish(fig, path)


def plot_funnel(
    table: pd.DataFrame,
    group: str,
    title: str | None = None,
    *,
    log_scale: bool = False,
    path: str | Path | None = None,
) -> Figure:
    """Each group's survival through a selection pipeline, from application to the last stage.

    One line per value of ``group`` (in table order) with a marker per point: at "applied" every
    group with an applicant is at 100 % (one without has no point), and after each stage at its
    ``cumulative_rate`` (the share of the group's applicants who advanced there). The last point
    of each line is labelled with the value and its share, right of the axes, spread apart so
    they never overlap and tied to their points by thin leader lines. Tick labels give the stage
    and how many candidates (of all groups) are still in.

    Args:
        table: Pipeline stages table (see module docstring), possibly for several group
            columns; the rows whose ``group`` is ``group`` are drawn.
        group: The group column whose values become lines, e.g. ``"race"``.
        title: Axes title (default ``Who is still in, by <group>``).
        log_scale: A logarithmic y axis, for pipelines whose last stage keeps few candidates.
        path: When given, the PNG is written there with ``save_figure``.

    Returns:
        The figure, with one axes holding one line per group value.

    Raises:
        ValueError: ``table`` has no rows for ``group``.
    """
    rows = table[table["group"] == group]
    if rows.empty:
        known = sorted(map(str, table["group"].unique())) if "group" in table else []
        raise ValueError(f"no rows for group `{group}`; the table has {known}")
    stages = list(dict.fromkeys(rows["stage"]))
    values = list(dict.fromkeys(rows["value"]))
    first = rows[rows["stage"] == stages[0]]
    counts = [int(first["entered"].sum())]
    counts += [int(rows.loc[rows["stage"] == stage, "advanced"].sum()) for stage in stages]
    x = np.arange(len(stages) + 1)
    shares = {}
    entered = first.groupby("value", sort=False)["entered"].sum()
    for value in values:
        by_stage = rows[rows["value"] == value].set_index("stage")["cumulative_rate"]
        # A group nobody applied from has no share to start at, not 100 %.
        start = 1.0 if entered.get(value, 0) > 0 else np.nan
        shares[value] = np.concatenate([[start], by_stage.reindex(stages).to_numpy(dtype=float)])
    fig = Figure(figsize=(max(6.5, 1.5 * len(x) + 3.0), 4.8), layout="constrained")
    ax = fig.add_subplot()
    for i, value in enumerate(values):
        ax.plot(
            x,
            shares[value],
            color=f"C{i}",
            marker=FUNNEL_MARKERS[i % len(FUNNEL_MARKERS)],
            linewidth=2,
            markersize=6,
            label=str(value),
        )
    if log_scale:
        positive = [v for s in shares.values() for v in s if v > 0]
        ax.set_yscale("log")
        ax.set_ylim(min(positive, default=0.01) / 1.5, 1.25)
        # Ticks at 1, 2 and 5 per decade: a decade apart alone leaves one or two labels.
        ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_minor_locator(NullLocator())
    else:
        ax.set_ylim(0, 1.08)
    ax.set_xlim(-0.25, x[-1] + 0.25)
    ends = [(str(v), shares[v][-1], f"C{i}") for i, v in enumerate(values)]
    _label_line_ends(ax, x[-1], ends, log_scale)
    # The counts are those still in after each stage: "after screen", not "screen".
    labels = ["applied", *(f"after {s}" for s in stages)]
    ax.set_xticks(x, [f"{label}\n(n = {n:,})" for label, n in zip(labels, counts, strict=True)])
    ax.yaxis.set_major_formatter(PercentFormatter(xmax=1, decimals=None))
    ax.set_ylabel("share of the group's applicants still in")
    ax.grid(axis="y", color="#e6e6e6", linewidth=0.8)
    ax.set_axisbelow(True)
    ax.spines[["top", "right"]].set_visible(False)
    ax.set_title(title or f"Who is still in, by {group}")
    return _finish(fig, path)


def plot_model_grades(
    grades: pd.DataFrame,
    *,
    model_col: str = "model_label",
    missing: Mapping[str, str] | None = None,
    title: str | None = None,
    path: str | Path | None = None,
) -> Figure:
    """Each model's log odds ratio of one contrast with its 95% interval (hollow) and the same
    estimate pulled toward the average over models (filled diamond: empirical-Bayes
    shrinkage, more pull for an estimate with fewer answers), models sorted by the pulled
    value, coloured by grade (Kline, Rose & Walters style); a model in ``missing`` gets a row
    of its own reading "no estimate" and why. The legend sits under the axes, over no data.
    One contrast: filter the grades table first.

    Args:
        grades: ``analysis.stats.grading.grade_models`` rows of one contrast.
        model_col: Column naming the model.
        missing: Model -> why it has no estimate (e.g. not fitted, did not converge).
        title: Axes title.
        path: When given, the PNG is written there with ``save_figure``.
    """
    data = grades.sort_values("shrunk").reset_index(drop=True)
    missing = dict(missing or {})
    colours = {"discriminates": "#b2182b", "suggestive": "#ef8a62", "no evidence": "#4d4d4d"}
    rows = len(missing) + len(data)
    fig = Figure(figsize=(6.5, 1.9 + 0.35 * rows), layout="constrained")
    ax = fig.add_subplot()
    # Models without an estimate take the bottom rows, each saying why in place of a marker.
    for row, why in enumerate(missing.values()):
        ax.text(
            0.02,
            row,
            why,
            transform=ax.get_yaxis_transform(),
            va="center",
            fontsize=8,
            style="italic",
            color="#4d4d4d",
            bbox={"facecolor": "white", "edgecolor": "none", "pad": 1},
        )
    y = np.arange(len(missing), rows)
    half = 1.959963984540054 * data["se"].to_numpy(dtype=float)
    handles: list[Any] = []
    for grade, colour in colours.items():
        mask = (data["grade"] == grade).to_numpy()
        if not mask.any():
            continue
        estimate = data.loc[mask, "estimate"].to_numpy(dtype=float)
        handles.append(
            ax.errorbar(
                estimate,
                y[mask],
                xerr=half[mask],
                fmt="o",
                mfc="white",
                color=colour,
                label=f"{grade}: estimate, 95% CI",
            )
        )
        ax.plot(data.loc[mask, "shrunk"], y[mask] + 0.2, "D", color=colour, ms=5)
    ax.axvline(0.0, color="black", lw=0.8)
    if len(data):
        ax.axvline(float(data["common_mean"].iloc[0]), color="grey", ls="--", lw=0.8)
    handles += [
        Line2D(
            [],
            [],
            color="grey",
            marker="D",
            ls="none",
            ms=5,
            label="estimate pulled toward the average (fewer answers, more pull)",
        ),
        Line2D([], [], color="grey", ls="--", lw=0.8, label="average over models"),
    ]
    labels = [*(f"{m} (no estimate)" for m in missing), *map(str, data[model_col])]
    ax.set_yticks(range(rows), labels)
    ax.set_ylim(-0.6, rows - 0.4)
    ax.set_xlabel("log odds ratio (group vs reference)")
    ax.set_title(title or "Models graded by their disparity")
    fig.legend(
        handles=handles,
        loc="outside lower center",
        fontsize="small",
        frameon=False,
        ncols=_legend_columns(handles, fig.get_figwidth()),
    )
    return _finish(fig, path)


def plot_policy_ratios(
    table: pd.DataFrame,
    group: str,
    title: str | None = None,
    *,
    threshold: float = 0.8,
    xlabel: str | None = None,
    path: str | Path | None = None,
) -> Figure:
    """End-to-end impact ratio by group, one line per policy, with the four-fifths line drawn.

    Args:
        table: :func:`biasim.analysis.stats.policy.policy_rates` output (``policy``, ``group``,
            ``value``, ``impact_ratio``, ``ratio_low``, ``ratio_high``); the rows whose
            ``group`` is ``group`` are drawn, policies in table order.
        group: The group column whose values are the x axis.
        title: Axes title.
        threshold: Where the dashed four-fifths line is drawn.
        xlabel: The x axis label (default ``group``).
        path: When given, the PNG is written there with ``save_figure``.

    Returns:
        The figure: one axes, one line with interval bars per policy.
    """
    rows = table[table["group"] == group]
    if rows.empty:
        raise ValueError(f"no rows for group `{group}`")
    values = list(dict.fromkeys(rows["value"]))
    policies = list(dict.fromkeys(rows["policy"]))
    x = np.arange(len(values))
    fig = Figure(figsize=(max(6.5, 0.9 * len(values) + 3.5), 4.6), layout="constrained")
    ax = fig.add_subplot()
    # Side by side, so the interval bars of policies never hide each other.
    offsets = (np.arange(len(policies)) - (len(policies) - 1) / 2) * 0.12
    for i, policy in enumerate(policies):
        part = rows[rows["policy"] == policy].set_index("value").reindex(values)
        ratio = part["impact_ratio"].to_numpy(dtype=float)
        errors = np.abs(np.vstack([ratio - part["ratio_low"], part["ratio_high"] - ratio]))
        ax.errorbar(
            x + offsets[i],
            ratio,
            yerr=np.nan_to_num(errors.astype(float)),
            color=f"C{i}",
            marker=FUNNEL_MARKERS[i % len(FUNNEL_MARKERS)],
            linewidth=2,
            capsize=3,
            label=str(policy),
        )
    ax.axhline(threshold, color="#b22222", linestyle="--", linewidth=1)
    ax.text(
        -0.45,
        threshold + 0.01,
        f"four-fifths ({threshold:g})",
        color="#b22222",
        va="bottom",
        fontsize=TICK_FONT_SIZE,
    )
    ax.set_xticks(x, [_readable(v) for v in values])
    ax.set_xlim(-0.5, x[-1] + 0.6)
    ax.set_ylim(0, 1.1)
    ax.set_xlabel(xlabel or group)
    ax.set_ylabel("end-to-end impact ratio (95% CI)")
    ax.grid(axis="y", color="#e6e6e6", linewidth=0.8)
    ax.set_axisbelow(True)
    ax.spines[["top", "right"]].set_visible(False)
    ax.legend(title="policy", loc="lower left", frameon=False)
    ax.set_title(title or f"Impact ratio by {group}, per policy")
    return _finish(fig, path)


def add_banner(fig: Figure, text: str) -> Figure:
    """Stamp ``text`` across the top of ``fig`` in a band of its own, e.g. the notice that
    the answers drawn came from the synthetic responder, not a language model.

    The figure grows by the band's height and its layout keeps out of the band, so the banner
    covers nothing. The text is wrapped to the figure's width.

    Returns:
        The same figure, with the banner as its last text (``fig.texts[-1]``).
    """
    width, height = fig.get_size_inches()
    chars = len(text)
    lines = [text]
    # The longest lines that fit, measured in the banner's bold font with room for its box.
    while chars > 10 and _width_in("\n".join(lines), BANNER_FONT_SIZE, "bold") > width - 0.4:
        chars -= 2
        lines = textwrap.wrap(text, chars)
    band = (len(lines) * BANNER_FONT_SIZE * 1.4 + 10) / 72
    # The constrained layout pins a suptitle to the figure's top edge whatever its rect, which
    # is under the band: the title gets a line of its own below the band, outside the layout.
    title = fig._suptitle  # matplotlib's only handle on the suptitle text
    title_band = 0.0
    if title is not None and title.get_text():
        lines_of_title = title.get_text().count("\n") + 1
        title_band = title.get_fontsize() * (1.2 * lines_of_title + 0.6) / 72
        title.set_in_layout(False)
        title._autopos = False  # else the layout moves it back to the top edge
    fig.set_size_inches(width, height + band + title_band)
    total = height + band + title_band
    if title_band:
        title.set_position((0.5, 1 - (band + title_band / 2) / total))
        title.set_verticalalignment("center")
    engine = fig.get_layout_engine()
    top = 1 - (band + title_band) / total
    if engine is not None and hasattr(engine, "set"):
        engine.set(rect=(0, 0, 1, top))
    else:
        fig.subplots_adjust(top=top * fig.subplotpars.top)
    fig.text(
        0.5,
        1 - band / (2 * total),
        "\n".join(lines),
        ha="center",
        va="center",
        fontsize=BANNER_FONT_SIZE,
        fontweight="bold",
        color="#7a5200",
        bbox={"facecolor": "#fff3c4", "edgecolor": "#d9a400", "boxstyle": "round,pad=0.3"},
    )
    return fig


@contextlib.contextmanager
def plain_text(fig: Figure) -> Iterator[None]:
    """Every label of ``fig`` drawn as written, never as mathtext.

    Labels are persona values, model names and answers: ``$\\frac{a$`` is a valid persona value
    and an invalid formula, which would stop the figure (and the analysis writing it). Texts
    made so far are switched off one by one; tick labels, made while drawing, read the setting.
    """
    for text in fig.findobj(Text):
        text.set_parse_math(False)
    with matplotlib.rc_context({"text.parse_math": False}):
        yield


def keep_inside(fig: Figure, *, rounds: int = 4) -> Figure:
    """Wrap the titles that would reach past the canvas at the figure's size.

    A title naming a study and a model has no bound on its length: measured after a layout
    pass, a title too wide is wrapped to fit (legends are sized where they are built, see
    :func:`_legend_columns`).

    Returns:
        The same figure.
    """
    if all(_clearly_fits(fig, text) for text in _titles(fig)):
        return fig  # nothing can reach past the canvas: spare the layout pass
    with plain_text(fig):  # a label is measured as it will be drawn: never as mathtext
        _wrap_overflowing_titles(fig, rounds)
    return fig


def _titles(fig: Figure) -> list[Any]:
    """The figure's suptitle and each axes' three titles, those with text."""
    titles = [fig._suptitle] if fig._suptitle is not None else []
    for ax in fig.axes:
        titles += [ax.title, ax._left_title, ax._right_title]
    return [t for t in titles if t.get_text()]


def _clearly_fits(fig: Figure, text: Text) -> bool:
    """Whether ``text`` is at most half as wide as the space it is centred in (its axes as
    placed before the layout, or the figure): no layout shrinks an axes by half, so it fits
    without drawing the figure to measure it."""
    if text.get_horizontalalignment() != "center" or text.get_position()[0] != 0.5:
        return False
    width_in = fig.get_size_inches()[0]
    axes = next((ax for ax in fig.axes if text is ax.title), None)
    room = width_in if axes is None else axes.get_position().width * width_in
    return _width_in(text.get_text(), text.get_fontsize(), text.get_fontweight()) <= room / 2


def _wrap_overflowing_titles(fig: Figure, rounds: int) -> None:
    for _ in range(rounds):
        fig.draw_without_rendering()
        canvas = fig.bbox
        changed = False
        for text in overflowing_titles(fig):
            extent = text.get_window_extent()
            share = (canvas.width - 8) / max(extent.width, 1)
            chars = max(8, int(len(text.get_text()) * share * 0.95))
            wrapped = "\n".join(textwrap.fill(line, chars) for line in text.get_text().split("\n"))
            changed |= wrapped != text.get_text()
            text.set_text(wrapped)
        if not changed:
            break


def overflowing_titles(fig: Figure) -> list[Any]:
    """Titles (the figure's, each axes') whose box reaches past the canvas."""
    return [t for t in _titles(fig) if not _inside(t.get_window_extent(), fig.bbox)]


def _inside(box: Any, canvas: Any, slack: float = 0.5) -> bool:
    return (
        box.x0 >= canvas.x0 - slack
        and box.y0 >= canvas.y0 - slack
        and box.x1 <= canvas.x1 + slack
        and box.y1 <= canvas.y1 + slack
    )


def save_figure(fig: Figure, path: str | Path, *, dpi: int = DPI) -> Path:
    """Write ``fig`` as PNG atomically (temporary file, then ``os.replace``) and close it.

    The image is ``figsize * dpi`` pixels: no tight bounding box, so sizes are predictable.
    Closing releases a pyplot-managed figure from pyplot; figures built here are not managed by
    pyplot and stay inspectable.

    Returns:
        The path written.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".png")
    try:
        with os.fdopen(fd, "wb") as handle, plain_text(fig):
            fig.savefig(handle, format="png", dpi=dpi)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    if fig.canvas.manager is not None:
        import matplotlib.pyplot as plt  # only reached for figures pyplot already manages

        plt.close(fig)
    return target


def _sorted(table: pd.DataFrame, cols: Sequence[str], orders: Mapping[str, Sequence[Any]]):
    """Rows ordered by ``cols`` in turn, each in its declared order (``orders``) and then in
    order of first appearance; stable, so rows tied on every column keep theirs."""
    keys = []
    for col in cols:
        declared = [v for v in orders.get(col, ()) if v in set(table[col])]
        seen = declared + [v for v in dict.fromkeys(table[col]) if v not in declared]
        rank = {v: i for i, v in enumerate(seen)}
        keys.append(table[col].map(rank).to_numpy())
    return table.iloc[np.lexsort(keys[::-1])] if keys else table


def _interval_errors(rates: pd.DataFrame) -> np.ndarray:
    """Error-bar lengths below and above each ``rate`` to ``ci_low``/``ci_high``; a rate of 0
    or 1 sits on its bound up to rounding, which must not make a length negative."""
    rate = rates["rate"].to_numpy(dtype=float)
    low = rate - rates["ci_low"].to_numpy(dtype=float)
    high = rates["ci_high"].to_numpy(dtype=float) - rate
    return np.clip(np.vstack([low, high]), 0, None)


def _readable(value: Any) -> str:
    """A level as a label: ``emergency_response`` reads "emergency response"."""
    return str(value).replace("_", " ")


def _case_tick(key: tuple[Any, ...], targets: Mapping[str, str] | None) -> str:
    """A case's tick label: each part wrapped, the first followed by its targeted decision."""
    parts = [textwrap.fill(_readable(v), _TICK_WRAP) for v in key]
    target = None if targets is None or not key else targets.get(key[0])
    if target:
        parts.insert(1, f"({target})")
    return "\n".join(parts)


def _width_in(text: str, size: float = TICK_FONT_SIZE, weight: str | int = "normal") -> float:
    """Width in inches of the widest line of ``text`` in the default font at ``size``."""
    return max(_line_width_in(line, float(size), weight) for line in text.split("\n"))


@functools.lru_cache(maxsize=8192)
def _line_width_in(line: str, size: float, weight: str | int) -> float:
    """One line's width; cached because the same labels and banner lines are measured for
    every figure of a run (uncached, wrapping the banner was a third of drawing a figure)."""
    font = FontProperties(size=size, weight=weight)
    return _TEXT_PATH.get_text_width_height_descent(line, font, ismath=False)[0] / 72


def _legend_columns(handles: Sequence[Any], width_in: float) -> int:
    """The most columns (up to one per entry) whose rows fit ``width_in``: each entry is its
    label plus matplotlib's handle, padding and column spacing (2 + 0.8 + 2 font sizes)."""
    size = FontProperties(size=rcParams["legend.fontsize"]).get_size_in_points()
    entries = [_width_in(h.get_label(), size) + 4.8 * size / 72 for h in handles]
    for columns in range(len(entries), 1, -1):
        rows = [entries[i : i + columns] for i in range(0, len(entries), columns)]
        # Columns are as wide as their widest entry.
        widths = [max(r[c] for r in rows if c < len(r)) for c in range(columns)]
        if sum(widths) + 0.3 <= width_in:
            return columns
    return 1


def _shares_panel(
    ax: Axes, panel: pd.DataFrame, case: pd.Series, group_col: str, target: str | None
) -> None:
    rates = panel["rate"].to_numpy(dtype=float)
    y = np.arange(len(panel))
    ax.barh(y, rates, color=TARGET_COLOR)
    ax.barh(y, 1 - rates, left=rates, color=ALTERNATIVE_COLOR)
    ax.errorbar(rates, y, xerr=_interval_errors(panel), fmt="none", ecolor="black", capsize=3, lw=1)
    for yi, n in zip(y, panel["n_valid"], strict=True):
        ax.text(1.02, yi, f"n = {int(n)}", ha="left", va="center", fontsize=8, clip_on=False)
    for yi, rate in zip(y, rates, strict=True):
        if math.isnan(rate):
            ax.text(0.5, yi, "no valid answers", ha="center", va="center", fontsize=8)
            continue
        # Labels sit in the upper part of the bar, clear of the interval drawn across its
        # middle. The target's share is always written (beside the bar when too thin for it),
        # so a bar all of the alternative reads "0%" of the target, not "100%".
        label_y = yi - _LABEL_RAISE
        if rate >= _MIN_LABELLED_SHARE:
            ax.text(
                rate / 2,
                label_y,
                f"{rate:.0%}",
                ha="center",
                va="center",
                color="white",
                fontsize=7,
            )
        else:
            ax.text(
                rate + 0.01,
                label_y,
                f"{rate:.0%}",
                ha="left",
                va="center",
                color=TARGET_COLOR,
                fontsize=7,
                fontweight="bold",
            )
        if 1 - rate >= _MIN_LABELLED_SHARE:
            ax.text(
                (1 + rate) / 2,
                label_y,
                f"{1 - rate:.0%}",
                ha="center",
                va="center",
                fontsize=7,
                color="#555555",
            )
    ax.axvline(float(case["pooled_rate"]), color="black", linewidth=1.5)
    labels = [
        f"{value} ({int(excluded)} excl.)" if excluded > 0 else str(value)
        for value, excluded in zip(panel[group_col], panel["n_excluded"], strict=True)
    ]
    ax.set_yticks(y, labels)
    ax.invert_yaxis()
    ax.set_xlim(0, 1)
    ax.xaxis.set_major_formatter(PercentFormatter(xmax=1))
    ax.set_xlabel(f"rate of {target}" if target else "rate of the targeted decision")


def _label_line_ends(
    ax: Axes, x: float, ends: Sequence[tuple[str, float, str]], log_scale: bool
) -> None:
    """Label each line's last point ``value  12.5%`` (``ends``: label, y, colour), spread apart.

    Labels are kept ``_LABEL_GAP`` apart in axes coordinates, so they never overlap however
    close the lines end; each has a thin leader line to its point.
    """
    low, high = ax.get_ylim()

    def to_axes(y: float) -> float:
        if log_scale:
            return (math.log(y) - math.log(low)) / (math.log(high) - math.log(low))
        return (y - low) / (high - low)

    drawn = sorted((end for end in ends if not math.isnan(end[1])), key=lambda end: end[1])
    # A share of 0 has no point on a log axis; its label sits at the bottom.
    at = [y if y > 0 or not log_scale else low for _, y, _ in drawn]
    wanted = [to_axes(y) for y in at]
    placed = list(wanted)
    for i in range(1, len(placed)):
        placed[i] = max(placed[i], placed[i - 1] + _LABEL_GAP)
    # Labels pushed above the axes come back down, pushing the lower ones down in turn.
    for i in reversed(range(len(placed))):
        ceiling = 1.0 if i == len(placed) - 1 else placed[i + 1] - _LABEL_GAP
        placed[i] = min(placed[i], ceiling)
    # The leader starts at the label's left edge, so leaders fan out between the last points
    # and the labels instead of crossing the labels.
    leader = {
        "arrowstyle": "-",
        "color": "#999999",
        "linewidth": 0.6,
        "shrinkA": 2,
        "shrinkB": 4,
        "relpos": (0.0, 0.5),
    }
    for (name, y, color), point, put in zip(drawn, at, placed, strict=True):
        # Labels sit right of the axes (constrained layout makes room for them, however long).
        ax.annotate(
            f"{name}  {y:.1%}",
            xy=(x, point),
            xytext=(1.04, put),
            textcoords="axes fraction",
            va="center",
            fontsize=9,
            color=color,
            arrowprops=leader,
        )


def _case_label(case: pd.Series) -> str:
    return dpd_label(float(case["dpd"]), bool(case["significant"]), float(case["threshold"]))


def _p_text(p: float) -> str:
    if p is None or math.isnan(p):
        return "p n/a"
    return "p < 0.001" if p < 0.001 else f"p = {p:.3f}"


def _finish(fig: Figure, path: str | Path | None) -> Figure:
    if path is not None:
        save_figure(fig, path)
    return fig
