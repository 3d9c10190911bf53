"""How the ``prism`` kind reads its scores against the no-gender-signal baseline
(``analysis.studies.prism.baseline``), and shows several models (LLMs or masked LMs) side by
side: the baselines per model, the words that read them, and the cross-model table."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from biasim.simulator.common.html import fmt, format_p
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
