"""Paper-style figures: the drawn bars, lines and labels carry exactly the numbers given."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.image as mpimg
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import to_rgb
from matplotlib.container import BarContainer

from biasim.analysis.figures import (
    SIGNIFICANT_HATCH,
    TARGET_COLOR,
    add_banner,
    dpd_label,
    plot_decision_shares,
    plot_dpd_by_condition,
    plot_implicit_explicit,
    plot_model_grades,
    save_figure,
)
from biasim.analysis.studies.letters.figures import plot_letters

CASE = {"model_label": "m1", "persona_condition": "contextualized"}

# (scenario, attribute) -> [(value, rate, n_excluded)], written by hand.
PANELS = {
    ("flood", "gender"): [("Male", 0.40, 0), ("Female", 0.64, 0), ("Non-binary", 0.58, 0)],
    ("flood", "race"): [("Asian", 0.90, 0), ("Black", 0.25, 3), ("White", 0.55, 0)],
    ("protest", "gender"): [("Male", 0.80, 0), ("Female", 0.86, 0), ("Non-binary", 0.84, 0)],
}
# (scenario, attribute) -> (pooled_rate, dpd, threshold, significant)
CASES = {
    ("flood", "gender"): (0.54, 0.24, 0.11, True),
    ("flood", "race"): (0.5667, 0.65, 0.12, True),
    ("protest", "gender"): (0.8333, 0.06, 0.09, False),
}


def _rates() -> pd.DataFrame:
    rows = []
    for (scenario, attribute), values in PANELS.items():
        for value, rate, excluded in values:
            rows.append(
                {
                    **CASE,
                    "scenario": scenario,
                    "attribute": attribute,
                    "value": value,
                    "n_units": 100,
                    "n_valid": 100 - excluded,
                    "n_excluded": excluded,
                    "k": round(rate * (100 - excluded)),
                    "rate": rate,
                    "ci_low": rate - 0.05,
                    "ci_high": rate + 0.05,
                }
            )
    return pd.DataFrame(rows)


def _cases() -> pd.DataFrame:
    rows = []
    for (scenario, attribute), (pooled, dpd, threshold, significant) in CASES.items():
        rows.append(
            {
                **CASE,
                "scenario": scenario,
                "attribute": attribute,
                "n_groups": 3,
                "n_valid": 300,
                "n_excluded": 0,
                "pooled_rate": pooled,
                "dpd": dpd,
                "threshold": threshold,
                "chance_dpd": threshold / 2,
                "p_value": 0.001 if significant else 0.4,
                "significant": significant,
                "max_group": "x",
                "min_group": "y",
            }
        )
    return pd.DataFrame(rows)


def _panel(fig, scenario: str, attribute: str):
    rows, cols = ["gender", "race"], ["flood", "protest"]
    return fig.axes[rows.index(attribute) * len(cols) + cols.index(scenario)]


def test_decision_shares_draw_the_given_rates() -> None:
    fig = plot_decision_shares(_rates(), _cases(), targets={"flood": "Evacuate"}, title="m1")
    # 2 persona groups x 2 scenarios; race x protest has no data and is switched off.
    assert len(fig.axes) == 4
    assert not _panel(fig, "protest", "race").axison
    for (scenario, attribute), values in PANELS.items():
        ax = _panel(fig, scenario, attribute)
        rates = [rate for _, rate, _ in values]
        n = len(values)
        assert len(ax.patches) == 2 * n
        target, alternative = ax.patches[:n], ax.patches[n:]
        assert [p.get_width() for p in target] == pytest.approx(rates)
        assert [p.get_x() for p in target] == pytest.approx([0.0] * n)
        assert [p.get_width() for p in alternative] == pytest.approx([1 - r for r in rates])
        assert [p.get_x() for p in alternative] == pytest.approx(rates)
        pooled, dpd, threshold, significant = CASES[(scenario, attribute)]
        # The error bars' caps are markers without a line; the pooled rate is the one line.
        (mean_line,) = [line for line in ax.lines if line.get_linestyle() != "None"]
        assert list(mean_line.get_xdata()) == pytest.approx([pooled, pooled])
        texts = {t.get_text() for t in ax.texts}
        assert {f"{round(100 * r)}%" for r in rates} <= texts
        assert {f"{round(100 * (1 - r))}%" for r in rates} <= texts
        title = ax.get_title()
        assert title.startswith(scenario)
        assert f"DPD {dpd:.2f}" in title and f"threshold {threshold:.2f}" in title
        assert ("*" in title) == significant
        assert (f"DPD {dpd:.2f}*" in title) == significant
        labels = [t.get_text() for t in ax.get_yticklabels()]
        expected = [f"{v} ({e} excl.)" if e else v for v, _, e in values]
        assert labels == expected
    assert _panel(fig, "flood", "gender").get_xlabel() == "rate of Evacuate"
    assert fig.get_suptitle() == "m1"


def test_dpd_label_marks_significance_and_missing_dpd() -> None:
    assert dpd_label(0.4249, True, 0.1151) == "DPD 0.42* (threshold 0.12)"
    assert dpd_label(0.06, False, 0.09) == "DPD 0.06 (threshold 0.09)"
    assert dpd_label(float("nan"), False, float("nan")) == "DPD n/a"


def test_decision_shares_need_one_case_row_per_panel() -> None:
    cases = pd.concat([_cases(), _cases().assign(model_label="m2")])
    with pytest.raises(ValueError, match="one model and persona condition"):
        plot_decision_shares(_rates(), cases)


def _condition_cases() -> pd.DataFrame:
    # (scenario, attribute, condition, dpd, threshold, significant); one combination missing.
    rows = [
        ("flood", "gender", "none", 0.05, 0.10, False),
        ("flood", "gender", "contextualized", 0.30, 0.11, True),
        ("flood", "race", "none", 0.08, 0.12, False),
        ("flood", "race", "contextualized", 0.62, 0.12, True),
        ("protest", "race", "contextualized", 0.44, 0.13, True),
    ]
    return pd.DataFrame(
        [
            {
                "model_label": "m1",
                "scenario": s,
                "attribute": a,
                "persona_condition": c,
                "dpd": d,
                "threshold": t,
                "significant": sig,
            }
            for s, a, c, d, t, sig in rows
        ]
    )


def test_dpd_by_condition_bars_hatches_and_thresholds() -> None:
    cases = _condition_cases()
    fig = plot_dpd_by_condition(cases, order=["none", "contextualized"])
    (ax,) = fig.axes
    assert [c.get_label() for c in ax.containers] == ["none", "contextualized"]
    assert len(ax.patches) == len(cases)
    for container, condition in zip(ax.containers, ["none", "contextualized"], strict=True):
        part = cases[cases["persona_condition"] == condition]
        assert [b.get_height() for b in container] == pytest.approx(part["dpd"].tolist())
        hatched = [b.get_hatch() == SIGNIFICANT_HATCH for b in container]
        assert hatched == part["significant"].tolist()
    # Case groups in order of appearance; the contextualized bar sits right of the none bar.
    none_x = [b.get_x() + b.get_width() / 2 for b in ax.containers[0]]
    ctx_x = [b.get_x() + b.get_width() / 2 for b in ax.containers[1]]
    assert none_x == pytest.approx([-0.2, 0.8])
    assert ctx_x == pytest.approx([0.2, 1.2, 2.2])
    assert [t.get_text() for t in ax.get_xticklabels()] == [
        "flood\ngender",
        "flood\nrace",
        "protest\nrace",
    ]
    stars = [t for t in ax.texts if t.get_text() == "*"]
    assert len(stars) == int(cases["significant"].sum())
    ticks = [seg for coll in ax.collections for seg in coll.get_segments()]
    drawn = sorted(((seg[0][0] + seg[1][0]) / 2, seg[0][1]) for seg in ticks)
    expected = sorted(zip(none_x + ctx_x, [0.10, 0.12, 0.11, 0.12, 0.13], strict=True))
    assert np.array(drawn) == pytest.approx(np.array(expected))


def test_dpd_by_condition_with_every_dpd_zero_says_so() -> None:
    """A plot with no visible bar is not left blank: the axes say every DPD is 0 and each
    empty slot reads its value."""
    cases = _condition_cases().assign(dpd=0.0, significant=False)
    (ax,) = plot_dpd_by_condition(cases, order=["none", "contextualized"]).axes
    texts = [t.get_text() for t in ax.texts]
    assert "no difference in any case: every DPD is 0" in texts
    assert texts.count("0") == len(cases)
    (ax,) = plot_dpd_by_condition(_condition_cases()).axes
    assert not [t for t in ax.texts if "every DPD" in t.get_text()]


def test_dpd_by_condition_rejects_several_models() -> None:
    cases = pd.concat([_condition_cases(), _condition_cases().assign(model_label="m2")])
    with pytest.raises(ValueError, match="one model"):
        plot_dpd_by_condition(cases)


def _summary(models: list[str]) -> pd.DataFrame:
    numbers = {
        "gpt-4o": (12, 0.549, 0.317, 11, 12, 0.083, 0.276, 1, 4.2, 0.0004, 22.0),
        "gpt-3": (12, 0.069, 0.070, 2, 12, 0.808, 0.158, 12, -14.9, 0.02, 22.0),
    }
    columns = [
        "n_cases_implicit",
        "mean_dpd_implicit",
        "sd_dpd_implicit",
        "n_significant_implicit",
        "n_cases_explicit",
        "mean_dpd_explicit",
        "sd_dpd_explicit",
        "n_significant_explicit",
        "t_statistic",
        "p_value",
        "df",
    ]
    return pd.DataFrame(
        [{"model_label": m, **dict(zip(columns, numbers[m], strict=True))} for m in models]
    )


@pytest.mark.parametrize("models", [["gpt-3", "gpt-4o"], ["gpt-4o"]])
def test_implicit_explicit_means_and_sd_error_bars(models: list[str]) -> None:
    summary = _summary(models)
    fig = plot_implicit_explicit(summary.iloc[::-1], model_order=models)
    (ax,) = fig.axes
    containers = [c for c in ax.containers if isinstance(c, BarContainer)]
    assert [c.get_label() for c in containers] == ["implicit", "explicit"]
    for container, kind in zip(containers, ["implicit", "explicit"], strict=True):
        means = summary[f"mean_dpd_{kind}"].to_numpy()
        sds = summary[f"sd_dpd_{kind}"].to_numpy()
        assert [b.get_height() for b in container] == pytest.approx(means)
        (bars,) = container.errorbar.lines[2]
        segments = bars.get_segments()
        assert [s[0][1] for s in segments] == pytest.approx(means - sds)
        assert [s[1][1] for s in segments] == pytest.approx(means + sds)
        texts = {t.get_text() for t in ax.texts}
        for k, n in zip(summary[f"n_significant_{kind}"], summary[f"n_cases_{kind}"], strict=True):
            assert f"{k}/{n}" in texts
    labels = [t.get_text() for t in ax.get_xticklabels()]
    assert [label.split("\n")[0] for label in labels] == models
    assert ("gpt-4o\np < 0.001") in labels
    if "gpt-3" in models:
        assert "gpt-3\np = 0.020" in labels


def test_implicit_explicit_leads_with_the_beyond_chance_test() -> None:
    summary = _summary(["gpt-4o"]).assign(p_excess=0.665)
    (ax,) = plot_implicit_explicit(summary).axes
    labels = [t.get_text() for t in ax.get_xticklabels()]
    assert labels == ["gpt-4o\nbeyond chance: p = 0.665\npaper's t-test: p < 0.001"]


def test_save_figure_writes_png_of_figsize_times_dpi(tmp_path) -> None:
    fig = plot_decision_shares(_rates(), _cases())
    width, height = fig.get_size_inches()
    target = tmp_path / "new" / "dir" / "shares.png"
    assert save_figure(fig, target) == target
    image = mpimg.imread(target)
    assert image.shape[:2] == (round(height * 150), round(width * 150))
    # The targeted-decision bars are really drawn: some pixels carry their colour.
    distance = np.abs(image[..., :3] - np.array(to_rgb(TARGET_COLOR))).max(axis=2)
    assert (distance < 0.02).sum() > 1000
    # Overwriting replaces the file and leaves no temporary file behind.
    fig2 = plot_implicit_explicit(_summary(["gpt-4o"]), path=target)
    w2, h2 = fig2.get_size_inches()
    assert mpimg.imread(target).shape[:2] == (round(h2 * 150), round(w2 * 150))
    assert [p.name for p in target.parent.iterdir()] == ["shares.png"]


def test_save_figure_closes_pyplot_figures(tmp_path) -> None:
    fig = plt.figure(figsize=(2, 1))
    fig.add_subplot().plot([0, 1], [0, 1])
    save_figure(fig, tmp_path / "line.png")
    assert not plt.fignum_exists(fig.number)
    assert mpimg.imread(tmp_path / "line.png").shape[:2] == (150, 300)


def _drawn(fig):
    """The figure rendered on an Agg canvas, so text extents are final."""
    FigureCanvasAgg(fig)
    fig.canvas.draw()
    return fig.canvas.get_renderer()


def _overlaps(texts, renderer) -> list[tuple[str, str]]:
    boxes = [(t.get_text(), t.get_window_extent(renderer)) for t in texts if t.get_text()]
    return [
        (a, b)
        for i, (a, box_a) in enumerate(boxes)
        for b, box_b in boxes[i + 1 :]
        if box_a.overlaps(box_b)
    ]


LONG_SCENARIOS = [
    "emergency_response",
    "authority_compliance",
    "negative_information_sharing",
    "career_path_selection",
]


def _long_cases(n_conditions: int) -> pd.DataFrame:
    conditions = ["no_persona", "non_contextualized", "contextualized"][:n_conditions]
    rows = [
        {
            "scenario": s,
            "attribute": a,
            "persona_condition": c,
            "dpd": 0.1 + 0.05 * i,
            "threshold": 0.15,
            "significant": i % 2 == 0,
        }
        for i, (s, a, c) in enumerate(
            (s, a, c)
            for s in LONG_SCENARIOS
            for a in ("gender", "race", "ideology")
            for c in conditions
        )
    ]
    return pd.DataFrame(rows)


@pytest.mark.parametrize("n_conditions", [1, 3])
def test_dpd_tick_labels_never_overlap(n_conditions: int) -> None:
    targets = dict(zip(LONG_SCENARIOS, ["Evacuate", "Join", "Share", "Astronaut"], strict=True))
    fig = plot_dpd_by_condition(_long_cases(n_conditions), targets=targets)
    renderer = _drawn(fig)
    (ax,) = fig.axes
    ticks = ax.get_xticklabels()
    assert len(ticks) == 12
    assert _overlaps(ticks, renderer) == []
    # The targeted decision is named under its scenario.
    assert ticks[0].get_text() == "emergency\nresponse\n(Evacuate)\ngender"


def test_intervals_at_a_rate_of_one_draw_despite_rounding() -> None:
    rates = _rates()
    rates.loc[0, ["rate", "ci_low", "ci_high"]] = [1.0, 0.9, 1.0 - 1e-16]
    ax = _panel(plot_decision_shares(rates, _cases()), "flood", "gender")
    (bars,) = [c for c in ax.collections if len(c.get_segments()) == 3]
    first = bars.get_segments()[0]
    assert (first[0][0], first[1][0]) == pytest.approx((0.9, 1.0))


def test_a_case_without_dpd_reads_n_a() -> None:
    cases = _condition_cases()
    cases.loc[1, "dpd"] = float("nan")
    (ax,) = plot_dpd_by_condition(cases, order=["none", "contextualized"]).axes
    assert [t.get_text() for t in ax.texts].count("n/a") == 1


def test_declared_orders_replace_alphabetical_ones() -> None:
    cases = _long_cases(3).sample(frac=1, random_state=3)
    order = ["no_persona", "non_contextualized", "contextualized"]
    orders = {"scenario": LONG_SCENARIOS, "attribute": ["gender", "race", "ideology"]}
    fig = plot_dpd_by_condition(cases, order=order, orders=orders)
    (ax,) = fig.axes
    labels = [t.get_text().replace("\n", " ") for t in ax.get_xticklabels()]
    expected = [f"{s} {a}".replace("_", " ") for s in LONG_SCENARIOS for a in orders["attribute"]]
    # Wrapping only replaces spaces by line breaks.
    assert labels == expected
    assert [c.get_label() for c in ax.containers] == order
    for container, condition in zip(ax.containers, order, strict=True):
        part = cases[cases["persona_condition"] == condition].set_index(["scenario", "attribute"])
        drawn = [b.get_height() for b in container]
        want = [part.loc[(s, a), "dpd"] for s in LONG_SCENARIOS for a in orders["attribute"]]
        assert drawn == pytest.approx(want)


def test_decision_shares_follow_the_declared_order_with_intervals_and_n() -> None:
    rates = _rates().sample(frac=1, random_state=5)
    orders = {
        "scenario": ["protest", "flood"],
        "attribute": ["race", "gender"],
        "value": ["Female", "Male", "Non-binary", "White", "Black", "Asian"],
    }
    fig = plot_decision_shares(
        rates, _cases(), targets={"flood": "Evacuate", "protest": "Join"}, orders=orders
    )
    renderer = _drawn(fig)
    # Rows race, gender; columns protest, flood (race x protest has no data).
    assert not fig.axes[0].axison
    assert fig.axes[1].get_title().startswith("flood")
    assert fig.axes[2].get_title().startswith("protest")
    gender_flood = fig.axes[3]
    labels = [t.get_text() for t in gender_flood.get_yticklabels()]
    assert labels == ["Female", "Male", "Non-binary"]
    race_flood = fig.axes[1]
    assert [t.get_text() for t in race_flood.get_yticklabels()] == [
        "White",
        "Black (3 excl.)",
        "Asian",
    ]
    assert race_flood.get_xlabel() == "rate of Evacuate"
    assert fig.axes[2].get_xlabel() == "rate of Join"
    # Wilson interval of every target bar, and n printed beside it.
    panel = _rates().set_index(["scenario", "attribute", "value"])
    for ax, (scenario, attribute) in [
        (race_flood, ("flood", "race")),
        (gender_flood, ("flood", "gender")),
    ]:
        values = [t.get_text().split(" (")[0] for t in ax.get_yticklabels()]
        (segments,) = [c for c in ax.collections if len(c.get_segments()) == len(values)][:1]
        spans = [(seg[0][0], seg[1][0]) for seg in segments.get_segments()]
        want = [
            (
                panel.loc[(scenario, attribute, v), "ci_low"],
                panel.loc[(scenario, attribute, v), "ci_high"],
            )
            for v in values
        ]
        assert np.array(spans) == pytest.approx(np.array(want))
        n_texts = [t.get_text() for t in ax.texts if t.get_text().startswith("n = ")]
        assert n_texts == [f"n = {panel.loc[(scenario, attribute, v), 'n_valid']}" for v in values]
    for ax in fig.axes:
        if ax.axison:
            assert _overlaps([*ax.get_yticklabels(), *ax.get_xticklabels()], renderer) == []
    # Nothing of one panel runs into the next: tick labels, titles, the n beside the bars.
    boxes = [ax.get_tightbbox(renderer) for ax in fig.axes if ax.axison]
    assert not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1 :])


def _letter_lexicon() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "category": ["agentic", "communal"],
            "odds_ratio": [3.4, 0.3],
            "ci_low": [1.5, 0.08],
            "ci_high": [48000.0, 0.65],
            "p_permutation": [0.067, 0.067],
        }
    )


def _letter_style() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "dimension": ["positive", "agentic"],
            "mean_male": [0.8, 0.7],
            "mean_female": [0.8, 0.2],
            "sd_male": [0.05, 0.4],
            "sd_female": [0.05, 0.4],
            "n_male": [10, 10],
            "n_female": [10, 10],
            "p_student": [0.4, 0.01],
        }
    )


@pytest.mark.parametrize(
    "make",
    [
        lambda: plot_decision_shares(_rates(), _cases()),
        lambda: plot_dpd_by_condition(_condition_cases()),
        lambda: plot_implicit_explicit(_summary(["gpt-3", "gpt-4o"])),
        lambda: plot_letters(_letter_lexicon(), _letter_style(), ("male", "female"), "a title"),
    ],
)
def test_banner_sits_in_its_own_band_above_everything(make) -> None:
    fig = make()
    height = fig.get_size_inches()[1]
    add_banner(fig, "SYNTHETIC RESPONDER - not a language model. " * 3)
    assert fig.get_size_inches()[1] > height
    renderer = _drawn(fig)
    banner = fig.texts[-1]
    assert banner.get_text().startswith("SYNTHETIC RESPONDER")
    box = banner.get_window_extent(renderer)
    figure_box = fig.bbox
    assert figure_box.x0 <= box.x0 and box.x1 <= figure_box.x1 and box.y1 <= figure_box.y1
    others = [ax.get_tightbbox(renderer) for ax in fig.axes]
    others += [t.get_window_extent(renderer) for t in fig.texts[:-1]]
    title = fig._suptitle
    if title is not None:
        # The title (under the constrained layout pinned to the top edge) below the band,
        # inside the figure, clear of the axes.
        title_box = title.get_window_extent(renderer)
        assert title_box.y1 <= box.y0 and title_box.y0 >= 0
        axes = [ax.get_tightbbox(renderer) for ax in fig.axes]
        assert not any(title_box.overlaps(a) for a in axes)
        others.append(title_box)
    assert not any(box.overlaps(other) for other in others)


def _grades() -> pd.DataFrame:
    # Five models; the two with the largest estimates sit at the right, where a legend
    # placed "best" inside the axes lands on them.
    rows = [
        ("m1", -0.1, 0.2, "no evidence"),
        ("m2", 0.0, 0.25, "no evidence"),
        ("m3", 0.1, 0.2, "no evidence"),
        ("m4", 1.2, 0.2, "discriminates"),
        ("m5", 1.0, 0.3, "suggestive"),
    ]
    table = pd.DataFrame(rows, columns=["model_label", "estimate", "se", "grade"])
    return table.assign(shrunk=table["estimate"] * 0.8, common_mean=0.3)


def test_model_grades_legend_is_plain_and_outside_the_axes() -> None:
    fig = plot_model_grades(_grades())
    (ax,) = fig.axes
    renderer = FigureCanvasAgg(fig).get_renderer()
    fig.draw(renderer)
    (legend,) = fig.legends
    assert not ax.get_legend()
    box, frame = legend.get_window_extent(renderer), ax.get_window_extent(renderer)
    assert box.y1 <= frame.y0 + 1, "the legend lies over the data"
    labels = [t.get_text() for t in legend.get_texts()]
    assert "average over models" in labels
    assert any(label.startswith("estimate pulled toward the average") for label in labels)
    assert not [label for label in labels if "shrunk" in label or "common mean" in label]


def test_model_grades_name_a_model_without_an_estimate() -> None:
    fig = plot_model_grades(_grades(), missing={"m6": "did not converge"})
    (ax,) = fig.axes
    ticks = [t.get_text() for t in ax.get_yticklabels()]
    assert ticks[0] == "m6 (no estimate)" and len(ticks) == 6
    assert "did not converge" in [t.get_text() for t in ax.texts]
