"""Key-term counts and distinctive words, checked against hand counts and hand-computed formulas."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import yaml
from statsmodels.stats.multitest import multipletests

from biasim.analysis.text.stemming import stem
from biasim.analysis.text.term_sets import BUNDLED_TERM_SETS, load_term_sets
from biasim.analysis.text.terms import (
    STOP_WORDS,
    distinctive_terms,
    strip_names,
    term_counts,
    tokenize,
)

PAPER_SETS = {
    "family_members": ["so(n|ns)", "daughte(r|rs)", "chil(d|dren)", "pe(t|ts)"],
    "safety_and_authority": [
        "valu(e|es|ing) safety",
        "prioritiz(e|es|ing) safety",
        "personal safety",
        "respec(t|ts|ting) authority",
    ],
    "standing_up": ["stan(d|ds|ding) up", "suppor(t|ts|ting) my community"],
    "not_immediate": ["no(t)? immediate"],
    "family_community": ["family", "community"],
    "knowledge_environment": ["knowledge", "environment"],
}


def test_bundled_li2025_term_sets_are_the_papers() -> None:
    assert load_term_sets(BUNDLED_TERM_SETS["li2025"]) == PAPER_SETS
    raw = yaml.safe_load(BUNDLED_TERM_SETS["li2025"].read_text(encoding="utf-8"))
    for name, entry in raw.items():
        assert "Section 5." in entry["source"], name


# Hand-written rationales; the comments give the hand count per term set.
RATIONALES = [
    # family 2 (son, daughter)
    ("Female", "I must protect my son and my daughter, so I will evacuate."),
    # family 2 (children, pets), safety 1 (personal safety)
    ("Female", "My children and our pets come first; personal safety matters."),
    # traps only: competent, petition, reason (contains "son")
    ("Female", "As a competent planner I signed the petition for a reason."),
    # not_immediate 1 (upper case), family 1 (CHILD)
    ("Female", "There is NO IMMEDIATE danger, but my CHILD is scared."),
    # not_immediate 2, the second across a line break
    ("Female", "The risk is not immediate. It is not\nimmediate at all."),
    # family 3 (Sons, daughters, pet); "petite" is a trap
    ("Female", "Sons, daughters and a petite pet."),
    ("Female", None),
    ("Female", float("nan")),
    # safety 2 (value safety, respect authority)
    ("Male", "I value safety and respect authority."),
    # standing_up 2, family_community 1 (community)
    ("Male", "Standing up for my beliefs and supporting my community matters."),
    # family 1 (children's); "Sonny" is a trap; "immediate action is not" is not "not immediate"
    ("Male", "Sonny took the children's bus; immediate action is not needed."),
    # knowledge_environment 2, family_community 2
    ("Male", "Knowledge of the environment and family helps the community."),
    # safety 2 (Prioritizing safety, prioritize safety)
    ("Male", "Prioritizing safety is wise; I prioritize safety."),
    # traps only: Stand-up, competent, nothing immediate
    ("Male", "Stand-up comedy and a competent team; nothing immediate."),
    ("Male", "   "),
    ("Non-binary", None),
]

# (n_matching, occurrences) per group and set, counted by hand from the comments above.
EXPECTED = {
    "Female": {
        "family_members": (4, 8),
        "safety_and_authority": (1, 1),
        "standing_up": (0, 0),
        "not_immediate": (2, 3),
        "family_community": (0, 0),
        "knowledge_environment": (0, 0),
    },
    "Male": {
        "family_members": (1, 1),
        "safety_and_authority": (2, 4),
        "standing_up": (1, 2),
        "not_immediate": (0, 0),
        "family_community": (2, 3),
        "knowledge_environment": (1, 2),
    },
}


def _corpus() -> pd.DataFrame:
    return pd.DataFrame(RATIONALES, columns=["value", "rationale"])


def test_term_counts_match_hand_counts() -> None:
    out = term_counts(_corpus(), "rationale", "value", PAPER_SETS)
    assert list(out.columns) == [
        "value",
        "term_set",
        "n_documents",
        "n_matching",
        "share",
        "occurrences",
    ]
    assert list(out["value"].unique()) == ["Female", "Male", "Non-binary"]
    for value, by_set in EXPECTED.items():
        rows = out[out["value"] == value].set_index("term_set")
        assert list(rows.index) == list(PAPER_SETS)
        # Missing and blank texts are not documents: 6 written rationales per group.
        assert (rows["n_documents"] == 6).all()
        for name, (matching, occurrences) in by_set.items():
            assert rows.loc[name, "n_matching"] == matching, (value, name)
            assert rows.loc[name, "occurrences"] == occurrences, (value, name)
            assert rows.loc[name, "share"] == pytest.approx(matching / 6)
    nonbinary = out[out["value"] == "Non-binary"]
    assert (nonbinary["n_documents"] == 0).all()
    assert (nonbinary["n_matching"] == 0).all()
    assert nonbinary["share"].isna().all()


@pytest.mark.parametrize(
    ("text", "term_set", "matches"),
    [
        ("a competent person", "family_members", 0),
        ("we signed a petition", "family_members", 0),
        ("for that reason", "family_members", 0),
        ("a petite house", "family_members", 0),
        ("my SON", "family_members", 1),
        ("Pets!", "family_members", 1),
        ("not immediate", "not_immediate", 1),
        ("no immediate", "not_immediate", 1),
        ("NOT IMMEDIATE", "not_immediate", 1),
        ("nothing immediate", "not_immediate", 0),
        ("cannot immediate", "not_immediate", 0),
        ("Stand-up", "standing_up", 0),
        ("stands  up", "standing_up", 1),
        ("familyness", "family_community", 0),
    ],
)
def test_word_boundaries_and_case(text: str, term_set: str, matches: int) -> None:
    df = pd.DataFrame({"g": ["x"], "t": [text]})
    out = term_counts(df, "t", ["g"], PAPER_SETS).set_index("term_set")
    assert out.loc[term_set, "n_matching"] == matches


def test_term_counts_several_group_columns() -> None:
    df = pd.DataFrame(
        {
            "scenario": ["flood", "flood", "career", None],
            "value": ["Liberal", "Liberal", "Liberal", "Liberal"],
            "t": ["No immediate threat.", "Act now.", "Gain knowledge.", "no immediate"],
        }
    )
    out = term_counts(df, "t", ["scenario", "value"], PAPER_SETS)
    assert list(out.columns[:3]) == ["scenario", "value", "term_set"]
    flood = out[(out["scenario"] == "flood") & (out["term_set"] == "not_immediate")]
    assert flood[["n_documents", "n_matching"]].to_numpy().tolist() == [[2, 1]]
    career = out[(out["scenario"] == "career") & (out["term_set"] == "knowledge_environment")]
    assert career[["n_documents", "n_matching"]].to_numpy().tolist() == [[1, 1]]
    # The row without a scenario is left out.
    assert set(out["scenario"]) == {"career", "flood"}


def test_invalid_regex_names_set_and_term(tmp_path) -> None:
    df = pd.DataFrame({"g": ["x"], "t": ["child"]})
    with pytest.raises(ValueError, match=r"broken.*chil\(d"):
        term_counts(df, "t", "g", {"broken": ["family", "chil(d"]})
    path = tmp_path / "sets.yaml"
    path.write_text("odd:\n  source: test\n  terms: ['pe(t|ts', 'x']\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"odd.*pe\(t\|ts"):
        load_term_sets(path)
    path.write_text("nosource:\n  terms: [family]\n", encoding="utf-8")
    with pytest.raises(ValueError, match="nosource"):
        load_term_sets(path)
    with pytest.raises(ValueError, match="empty string"):
        term_counts(df, "t", "g", {"void": ["(x)?"]})


def test_non_text_raises() -> None:
    with pytest.raises(TypeError, match="t"):
        term_counts(pd.DataFrame({"g": ["x"], "t": [3]}), "t", "g", PAPER_SETS)


def test_tokenize_lowercases_and_drops_stop_words() -> None:
    assert tokenize("I don’t think it's NOT safe, 2 agents' homes") == [
        "don't",
        "think",
        "not",
        "safe",
        "agents",
        "homes",
    ]
    assert {"no", "not", "never"}.isdisjoint(STOP_WORDS)


def _oracle(counts: dict[str, dict[str, int]], alpha: dict[str, float], a0: float) -> dict:
    """Monroe et al. eqs. 16-22 written out with plain math, each group against the rest."""
    words = sorted(alpha)
    total = {w: sum(c.get(w, 0) for c in counts.values()) for w in words}
    n_all = sum(total.values())
    out = {}
    for group, c in counts.items():
        n_g = sum(c.values())
        n_r = n_all - n_g
        for w in words:
            y_g, y_r, a = c.get(w, 0), total[w] - c.get(w, 0), alpha[w]
            delta = math.log((y_g + a) / (n_g + a0 - y_g - a)) - math.log(
                (y_r + a) / (n_r + a0 - y_r - a)
            )
            z = delta / math.sqrt(1 / (y_g + a) + 1 / (y_r + a))
            out[(group, w)] = (y_g, y_r, delta, z, math.erfc(abs(z) / math.sqrt(2)))
    return out


TINY = pd.DataFrame(
    {
        "value": ["A", "A", "B", "B", "B"],
        "rationale": [
            "apple apple banana",
            "Apple, cherry!",
            "banana cherry cherry",
            "banana",
            None,
        ],
    }
)
# A: apple 3, banana 1, cherry 1 (5 tokens); B: banana 2, cherry 2 (4 tokens).
TINY_COUNTS = {"A": {"apple": 3, "banana": 1, "cherry": 1}, "B": {"banana": 2, "cherry": 2}}


@pytest.mark.parametrize(
    ("prior", "alpha0", "alpha"),
    [
        # informative: a_w = a0 * corpus count / 9 tokens; every word has 3 tokens.
        ("informative", 10.0, {"apple": 10 / 3, "banana": 10 / 3, "cherry": 10 / 3}),
        # informative default: a0 = 9 tokens, so a_w is the corpus count.
        ("informative", None, {"apple": 3.0, "banana": 3.0, "cherry": 3.0}),
        # uniform default: 0.01 per word.
        ("uniform", None, {"apple": 0.01, "banana": 0.01, "cherry": 0.01}),
    ],
)
def test_log_odds_match_hand_computation(prior, alpha0, alpha) -> None:
    a0 = sum(alpha.values())
    expected = _oracle(TINY_COUNTS, alpha, a0)
    out = distinctive_terms(
        TINY, "rationale", "value", prior=prior, alpha0=alpha0, min_count=1, top_n=10
    )
    assert list(out.columns) == [
        "value",
        "term",
        "forms",
        "count_group",
        "count_rest",
        "log_odds",
        "z",
        "p_value",
        "q_value",
        "significant",
    ]
    keys = sorted(expected)
    q_values = multipletests([expected[k][4] for k in keys], method="fdr_bh")[1]
    q = dict(zip(keys, q_values, strict=True))
    positive = {k for k, v in expected.items() if v[3] > 0}
    assert {(r.value, r.term) for r in out.itertuples()} == positive
    for row in out.itertuples():
        y_g, y_r, delta, z, p = expected[(row.value, row.term)]
        assert (row.count_group, row.count_rest) == (y_g, y_r)
        assert row.log_odds == pytest.approx(delta, rel=1e-12)
        assert row.z == pytest.approx(z, rel=1e-12)
        assert row.p_value == pytest.approx(p, rel=1e-9)
        assert row.q_value == pytest.approx(q[(row.value, row.term)], rel=1e-9)
    # Sorted by group, then z descending.
    for _, part in out.groupby("value"):
        assert part["z"].is_monotonic_decreasing
    assert out["value"].is_monotonic_increasing


_SHARED_TEXT = (
    "river bridge market garden harbor forest valley meadow canyon island "
    "village castle tower temple school office museum station factory farm"
)
SHARED = _SHARED_TEXT.split()


def _planted(seed: int = 11) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    for value in ("Asian", "Black", "White"):
        for _ in range(40):
            words = list(rng.choice(SHARED, size=10))
            if value == "Black":
                words.insert(int(rng.integers(0, 10)), "levee")
            rows.append((value, " ".join(words)))
    return pd.DataFrame(rows, columns=["value", "rationale"])


def test_planted_word_is_top_and_shared_words_are_not_significant() -> None:
    out = distinctive_terms(_planted(), "rationale", "value", top_n=5)
    black = out[out["value"] == "Black"]
    top = black.iloc[0]
    assert top["term"] == "levee"
    assert (top["count_group"], top["count_rest"]) == (40, 0)
    assert top["q_value"] < 0.05 and top["significant"]
    assert not out[out["term"] != "levee"]["significant"].any()
    assert "levee" not in set(out[out["value"] != "Black"]["term"])
    assert out.groupby("value").size().max() <= 5


def test_min_count_and_group_checks() -> None:
    out = distinctive_terms(TINY, "rationale", "value", min_count=4)
    assert out.empty
    assert "value" in out.columns
    with pytest.raises(ValueError, match="two groups"):
        distinctive_terms(TINY[TINY["value"] == "A"], "rationale", "value")
    with pytest.raises(ValueError, match="prior"):
        distinctive_terms(TINY, "rationale", "value", prior="flat")


def test_a_corpus_of_one_word_has_no_distinctive_terms_and_no_error() -> None:
    """Small models answer with the same word over and over; that word is the whole corpus,
    its log-odds are undefined, and the scan reports nothing instead of failing."""
    same = pd.DataFrame(
        {"rationale": ["Evacuate.", "evacuate", "EVACUATE!"] * 2, "value": ["A", "B", "C"] * 2}
    )
    out = distinctive_terms(same, "rationale", "value", min_count=1)
    assert out.empty
    mixed = pd.concat(
        [same, pd.DataFrame({"rationale": ["levee levee levee"] * 3, "value": ["A"] * 3})]
    )
    found = distinctive_terms(mixed, "rationale", "value", min_count=1)
    assert found.iloc[0]["term"] == "levee" and found["q_value"].notna().all()


# Porter (1980), step 1 examples, with step 5a applied after them (a final e dropped when the
# rest has m > 1, or m = 1 and does not end consonant-vowel-consonant).
@pytest.mark.parametrize(
    ("word", "key"),
    [
        ("caresses", "caress"),
        ("ponies", "poni"),
        ("ties", "ti"),
        ("caress", "caress"),
        ("cats", "cat"),
        ("feed", "feed"),
        ("plastered", "plaster"),
        ("bled", "bled"),
        ("motoring", "motor"),
        ("sing", "sing"),
        ("hopping", "hop"),
        ("tanned", "tan"),
        ("falling", "fall"),
        ("hissing", "hiss"),
        ("fizzed", "fizz"),
        ("failing", "fail"),
        ("filing", "file"),
        ("happy", "happi"),
        ("sky", "sky"),
        ("conflated", "conflat"),
        ("rate", "rate"),
        ("cease", "ceas"),
    ],
)
def test_stem_follows_porters_inflectional_rules(word: str, key: str) -> None:
    assert stem(word) == key


@pytest.mark.parametrize(
    "family",
    [
        ["value", "values", "valued", "valuing", "Value's"],
        ["evacuate", "evacuates", "evacuated", "evacuating"],
        ["child", "children", "child's", "children's"],
        ["family", "families", "family's"],
        ["prioritize", "prioritizes", "prioritized", "prioritizing"],
        ["stand", "stands", "standing"],
        ["hope", "hopes", "hoped", "hoping"],
        ["son", "sons"],
    ],
)
def test_inflections_share_one_key(family: list[str]) -> None:
    assert len({stem(w) for w in family}) == 1


@pytest.mark.parametrize(
    "different",
    [("son", "song"), ("pet", "petition"), ("new", "news"), ("car", "care"), ("hop", "hope")],
)
def test_different_words_keep_different_keys(different: tuple[str, str]) -> None:
    assert stem(different[0]) != stem(different[1])


def test_plain_terms_count_inflections_and_regex_terms_count_what_they_spell() -> None:
    df = pd.DataFrame(
        {
            "g": ["x"] * 5,
            "t": [
                "Our families come first.",
                "My family's safety.",
                "I keep valuing safety.",
                "We are petting the dog.",
                "familyness",
            ],
        }
    )
    sets = {"family": ["family"], "safety": ["value safety"], "pets": ["pe(t|ts)"]}
    on = term_counts(df, "t", "g", sets).set_index("term_set")["n_matching"]
    off = term_counts(df, "t", "g", sets, inflections=False).set_index("term_set")["n_matching"]
    # "families", "family's" / "valuing safety"; the regex spells pet|pets only.
    assert on.to_dict() == {"family": 2, "safety": 1, "pets": 0}
    assert off.to_dict() == {"family": 1, "safety": 0, "pets": 0}


def test_a_span_matched_by_a_plain_and_a_regex_term_counts_once() -> None:
    df = pd.DataFrame({"g": ["x"], "t": ["families and family"]})
    out = term_counts(df, "t", "g", {"f": ["family", "famil(y|ies)"]})
    assert out.loc[0, "occurrences"] == 2


def test_counts_restricted_to_a_chosen_option_equal_counts_of_those_rows() -> None:
    df = _corpus().assign(chose=[True, False, True, True, None, False, True, None] * 2)
    restricted = term_counts(df, "rationale", "value", PAPER_SETS, chose_col="chose")
    chosen_rows = df[df["chose"].astype("boolean").fillna(False).astype(bool)]
    direct = term_counts(chosen_rows, "rationale", "value", PAPER_SETS)
    merged = restricted.merge(
        direct, how="left", on=["value", "term_set"], suffixes=("", "_direct")
    )
    # A group whose units all chose otherwise stays, with nothing counted.
    for col in ("n_documents", "n_matching", "occurrences"):
        assert (merged[col] == merged[f"{col}_direct"].fillna(0)).all(), col
    assert set(merged.loc[merged["n_documents_direct"].isna(), "value"]) == {"Non-binary"}
    # Every written text is either counted or counted as left out, never dropped.
    written = df["rationale"].map(lambda t: isinstance(t, str) and bool(t.strip()))
    by_value = written.groupby(df["value"]).sum()
    first = restricted.drop_duplicates("value").set_index("value")
    assert (first["n_documents"] + first["n_not_chosen"]).to_dict() == by_value.to_dict()
    assert "n_not_chosen" not in direct.columns


def test_strip_names_removes_own_name_any_case_and_others_as_written() -> None:
    texts = pd.Series(["As maria, Maria's family matters.", "Ask Hope; I hope dearly.", None])
    own = pd.Series(["Maria Lopez", "Jamal Hope", None])
    cleaned, removed = strip_names(texts, names=["Hope Diaz"], own=own)
    assert tokenize(cleaned[0]) == ["family", "matters"]
    # "Hope" is another agent's name (as written) and this agent's own: any case goes.
    assert tokenize(cleaned[1]) == ["ask", "dearly"]
    assert pd.isna(cleaned[2])
    assert removed == 4
    others_only, n = strip_names(pd.Series(["Ask Hope; I hope dearly."]), names=["Hope Diaz"])
    assert tokenize(others_only[0]) == ["ask", "hope", "dearly"] and n == 1


def test_names_removed_before_the_scan_do_not_top_it() -> None:
    df = _planted()
    named = df.assign(
        rationale=df["rationale"] + " " + df["value"].map({"Black": "Jamal"}).fillna("")
    )
    raw = distinctive_terms(named, "rationale", "value", top_n=3)
    assert raw[raw["value"] == "Black"].iloc[0]["term"] in {"jamal", "levee"}
    assert "jamal" in set(raw["term"])
    cleaned, removed = strip_names(named["rationale"], names=["Jamal Washington"])
    assert removed == 40
    out = distinctive_terms(named.assign(rationale=cleaned), "rationale", "value", top_n=3)
    assert "jamal" not in set(out["term"])
    assert out[out["value"] == "Black"].iloc[0]["term"] == "levee"


def test_distinctive_terms_count_inflections_together() -> None:
    rows = [("A", "child children child's kid"), ("B", "kid kid dog")] * 5
    df = pd.DataFrame(rows, columns=["value", "rationale"])
    out = distinctive_terms(df, "rationale", "value", min_count=1).set_index(["value", "term"])
    assert out.loc[("A", "child"), "count_group"] == 15
    assert out.loc[("A", "child"), "forms"].split(", ") == ["child", "child's", "children"]
    off = distinctive_terms(df, "rationale", "value", min_count=1, inflections=False)
    assert set(off[off["value"] == "A"]["term"]) >= {"child", "children"}
    assert off.set_index(["value", "term"]).loc[("A", "child"), "count_group"] == 5
