"""How the ``prism`` kind reads its scores against the no-gender-signal baseline
(``analysis.studies.prism.baseline``), and shows several models (LLMs or masked LMs) side by
side: the baselines per model, the words that read them, and the cross-model table."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from biasim.simulator.common.html import fmt, format_p
from biasim.simulator.common.tables import print_table
from biasim.simulator.kinds.lazy import pd

#: A baseline this far from 0 gets a warning that scores must not be read against 0.
OFF_ZERO = 0.5
SIDE_NAMES = {"posting": "postings", "application": "applications", "text": "texts"}


def model_baselines(
    scorer: Any,
    rows: pd.DataFrame,
    postings: list[str],
    applications: list[str],
    answered: pd.Series,
    path: Path | None,
) -> pd.DataFrame:
    """Each model's baselines: its postings and its answered applications (see
    :func:`analysis.studies.prism.scorer.cached_baseline`), with ``model_label``."""
    from biasim.analysis.studies.prism.scorer import BASELINE_COLUMNS, cached_baseline

    out = []
    labels = rows["model_label"].astype(str).to_numpy()
    ok = answered.to_numpy()
    for model in dict.fromkeys(labels):
        mine = labels == model
        texts = {
            "posting": [t for t, m in zip(postings, mine, strict=True) if m],
            "application": [t for t, m, a in zip(applications, mine, ok, strict=True) if m and a],
        }
        out.append(cached_baseline(scorer, texts, path).assign(model_label=model))
    if not out:
        return pd.DataFrame(columns=[*BASELINE_COLUMNS, "model_label"])
    return pd.concat(out, ignore_index=True)


def reading(row: Mapping[str, Any]) -> str:
    """One side's mean score read against its baseline, in words."""
    side = SIDE_NAMES.get(row["side"], row["side"])
    where = (
        f"{side} {row['dimension']}: mean {fmt(row['observed'])}, baseline "
        f"{fmt(row['baseline'])} (95 % null {fmt(row['low'])} to {fmt(row['high'])})"
    )
    if row["verdict"] in ("masculine", "feminine"):
        return f"{where}: {row['verdict']} beyond the baseline (p {format_p(row['p'])})"
    return (
        f"{where}: within the baseline, not called masculine or feminine (p {format_p(row['p'])})"
    )


def warnings(baselines: pd.DataFrame, word_lists: pd.DataFrame) -> list[str]:
    """A warning per dimension whose baseline is far from 0: its scores are not read against 0."""
    out = []
    sizes = {(r.dimension, r.side): int(r.words) for r in word_lists.itertuples()}
    for dim, group in baselines.groupby("dimension", sort=False):
        far = group.loc[group["baseline"].abs() >= OFF_ZERO, "baseline"]
        if far.empty:
            continue
        fem, mas = sizes.get((dim, "fem"), 0), sizes.get((dim, "mas"), 0)
        out.append(
            f"{dim}: texts with no gender signal score about {fmt(far.iloc[0])} with these word "
            f"lists ({fem} feminine vs {mas} masculine words) and this masked LM; read its "
            "scores against the baseline, not against 0"
        )
    return out


def print_baselines(summary: dict[str, Any], console: Console) -> None:
    """The baselines table and the warnings, under the scores."""
    rows = summary.get("baseline") or []
    if not rows:
        return
    several = len({r["model_label"] for r in rows}) > 1
    lm_of = summary.get("masked_lm_by_model") or {}
    if len(set(lm_of.values())) > 1:
        pairs = "; ".join(f"{model} {lm}" for model, lm in lm_of.items())
        console.print(f"masked LM per model: {pairs}", highlight=False)
    table = Table(
        title=f"{summary['name']}: scores against the no-gender-signal baseline",
        box=box.SIMPLE_HEAD,
        padding=(0, 1),
        show_edge=False,
    )
    heads = ["dim", "side", "mean", "baseline", "95 % null", "p", "reading"]
    for col in (["model"] if several else []) + heads:
        table.add_column(col, justify="left" if col == "reading" else "right", no_wrap=True)
    for row in rows:
        table.add_row(
            *([str(row["model_label"])] if several else []),
            str(row["dimension"]),
            SIDE_NAMES.get(row["side"], row["side"]),
            fmt(row["observed"]),
            fmt(row["baseline"]),
            f"{row['low']:.2f}..{row['high']:.2f}",
            fmt(row["p"], "p"),
            row["verdict"] if row["verdict"] != "within the baseline" else "within",
        )
    print_table(console, table)
    console.print(BASELINE_NOTE, highlight=False)
    for line in summary.get("baseline_warnings", []):
        console.print(Text("warning: ", style="bold yellow") + line, highlight=False)


BASELINE_NOTE = (
    "baseline = the mean score the same texts get when the pooled words of a dimension are "
    "dealt at random to the feminine and masculine lists (same sizes; a text with no gender "
    "signal); 95 % null = its range over the dealings; p = permutation test of the observed "
    "mean against them (unit: the words' gender labels, one dealing for every text). "
    "masculine / feminine only beyond the baseline at 0.05; mean = over the texts the "
    "baseline used (up to 4000 masked tokens per side)."
)


def models_table(
    summary: pd.DataFrame,
    fit: pd.DataFrame,
    baselines: pd.DataFrame,
    masked_lm_of: Mapping[str, str],
) -> pd.DataFrame:
    """Every model's scores per dimension side by side with their baselines (Figures 6-7's
    comparison across masked LMs, or across LLMs with one masked LM)."""
    base = baselines.pivot_table(
        index=["model_label", "dimension"],
        columns="side",
        values=["baseline", "low", "high", "verdict"],
        aggfunc="first",
    )
    base.columns = [f"{side}_{what}" for what, side in base.columns]
    unfiltered = fit.loc[~fit["dbscan"].astype(bool), ["model_label", "dimension", "pearson_r"]]
    keep = ["model_label", "dimension", "pairs", "posting_mean", "application_mean"]
    out = summary[keep].merge(base.reset_index(), on=["model_label", "dimension"], how="left")
    out = out.merge(unfiltered, on=["model_label", "dimension"], how="left")
    out.insert(1, "masked_lm", out["model_label"].map(lambda m: masked_lm_of.get(m, "")))
    order = ["posting_baseline", "posting_low", "posting_high", "posting_verdict"]
    order += ["application_baseline", "application_low", "application_high"]
    order += ["application_verdict", "pearson_r"]
    return out[[*out.columns[:6], *[c for c in order if c in out.columns]]]
