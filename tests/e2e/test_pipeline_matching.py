"""Populations and matchings: each document read the declared number of times, both orders of
every pair, stratified pools, carried shortlists, counterfactual names; bad pipelines exit 2
naming file, line and field before any call."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from biasim.agents.documents import Document
from biasim.simulator.cli import app
from biasim.simulator.engine.matching import REDACTED, form_evaluations
from biasim.simulator.study.design import iter_populations
from biasim.simulator.study.load import load_study
from biasim.simulator.study.populations import ReadsConfig
from biasim.simulator.study.stage_graph import stage_order
from tests import pipeline_studies


def documents(tmp_path: Path, **changes) -> tuple[list[Document], dict]:
    path = pipeline_studies.write(tmp_path / "s.yaml", pipeline_studies.study(**changes))
    config = load_study(path).config
    docs = [
        Document(spec, f"{spec.agent_id}/apply", f"Dear employer, I am {spec.persona.name}.")
        for spec in iter_populations(config)
        if spec.population == "applicants"
    ]
    return docs, config.personas.axes


def test_pool_reads_every_document_once_and_holds_every_group(tmp_path: Path) -> None:
    docs, axes = documents(tmp_path)
    reads = ReadsConfig(stage="apply", matching="pool", size=8, draw="stratified", within=["job"])
    matching = form_evaluations(reads, "screen", docs, k=3, seed=5, axes=axes)
    shown = [s.document.unit_id for e in matching.evaluations for s in e.shown]
    assert sorted(shown) == sorted(d.unit_id for d in docs)  # each read exactly once
    assert len(matching.evaluations) == 64 // 8 and not matching.excluded
    for evaluation in matching.evaluations:
        assert evaluation.k == 3 and len(evaluation.shown) == 8
        cells = Counter(s.attributes for s in evaluation.shown)
        assert len(cells) == 4 and set(cells.values()) == {2}  # 2 of each race x gender
        jobs = {dict(s.document.author.levels)["job"] for s in evaluation.shown}
        assert len(jobs) == 1  # `within: [job]`
    # Positions are shuffled within pools: the first shown is not always the same group.
    firsts = Counter(e.shown[0].attributes for e in matching.evaluations)
    assert len(firsts) > 1
    again = form_evaluations(reads, "screen", docs, k=3, seed=5, axes=axes)
    assert again.evaluations == matching.evaluations  # resumable: the same draw


def test_random_pools_count_the_leftovers(tmp_path: Path) -> None:
    docs, axes = documents(tmp_path)
    reads = ReadsConfig(stage="apply", matching="pool", size=6)
    matching = form_evaluations(reads, "screen", docs[:62], k=3, seed=1, axes=axes)
    sizes = sorted(len(e.shown) for e in matching.evaluations)
    assert sizes == [2] * 0 + [6] * 10  # 62 = 10 x 6 + 2; a pool of 2 cannot select 3
    assert matching.excluded == {"pool of 2 cannot select 3": 2}


def test_pairs_are_shown_in_both_orders_and_differ_in_the_axis(tmp_path: Path) -> None:
    docs, axes = documents(tmp_path)
    reads = ReadsConfig(stage="apply", matching="pair", differ_in="gender", within=["job", "race"])
    matching = form_evaluations(reads, "compare", docs, k=1, seed=3, axes=axes)
    by_cluster: dict[str, list] = {}
    for e in matching.evaluations:
        by_cluster.setdefault(e.cluster, []).append(e)
    assert len(by_cluster) == 32 and not matching.excluded
    for pair in by_cluster.values():
        ab, ba = pair
        assert ab.shown == ba.shown[::-1]  # both orders
        a, b = (dict(s.attributes) for s in ab.shown)
        assert a["gender"] != b["gender"] and a["race"] == b["race"]
    counts = Counter(s.document.unit_id for e in matching.evaluations for s in e.shown)
    assert set(counts.values()) == {2}  # each document: one pair, two orders


def test_pairs_without_partner_are_counted(tmp_path: Path) -> None:
    docs, axes = documents(tmp_path)
    women = [d for d in docs if dict(d.author.persona.attributes)["gender"] == "female"]
    reads = ReadsConfig(stage="apply", matching="pair", differ_in="gender")
    matching = form_evaluations(reads, "compare", [*docs, *women[:3]], k=1, seed=3, axes=axes)
    assert matching.excluded == {"no partner": 3}


def test_counterfactual_reads_each_document_under_each_name(tmp_path: Path) -> None:
    docs, axes = documents(tmp_path)
    reads = ReadsConfig(stage="apply", counterfactual="gender")
    names = {
        (spec.persona.attributes, spec.index): spec.persona.name
        for spec in {d.author for d in docs}
    }
    matching = form_evaluations(
        reads, "rate", docs, k=0, seed=3, axes=axes, names=lambda a, i: names.get((a, i))
    )
    assert len(matching.evaluations) == 2 * len(docs)
    for doc in docs[:8]:
        mine = [e for e in matching.evaluations if e.cluster == doc.author.agent_id]
        assert {e.shown[0].variant for e in mine} == {"female", "male"}
        own = dict(doc.author.persona.attributes)
        for e in mine:
            shown = e.shown[0]
            assert dict(shown.attributes)["race"] == own["race"]  # only the axis changes
            if shown.variant == own["gender"]:
                assert shown.text == doc.text and shown.name == doc.author.persona.name
            else:
                assert doc.author.persona.name not in shown.text
                assert shown.name is not None and shown.name in shown.text


def test_redaction_removes_the_name(tmp_path: Path) -> None:
    docs, axes = documents(tmp_path)
    reads = ReadsConfig(stage="apply", author="redacted")
    matching = form_evaluations(reads, "rate", docs, k=0, seed=3, axes=axes)
    for e in matching.evaluations:
        shown = e.shown[0]
        assert shown.name == REDACTED and shown.attributes == () and REDACTED in shown.text
        assert e.shown[0].document.author.persona.name not in shown.text


def test_carry_pools_keep_the_shortlist_of_each_pool(tmp_path: Path) -> None:
    docs, axes = documents(tmp_path)
    carried = {
        "job=nurse/pool0": [d.author.agent_id for d in docs[:3]],
        "x": [docs[5].author.agent_id],
    }
    reads = ReadsConfig(stage="apply", after="screen", matching="pool", draw="carry")
    matching = form_evaluations(reads, "offer", docs, k=1, seed=5, axes=axes, carried=carried)
    assert [e.cluster for e in matching.evaluations] == ["job=nurse/pool0"]
    assert {s.document for s in matching.evaluations[0].shown} == set(docs[:3])
    assert matching.excluded == {"pool of 1 cannot select 1": 1}


def test_stage_order_follows_the_graph(tmp_path: Path) -> None:
    data = pipeline_studies.study()
    data["stages"] = [data["stages"][2], data["stages"][0], data["stages"][1]]  # offer first
    path = pipeline_studies.write(tmp_path / "s.yaml", data)
    assert stage_order(load_study(path).config) == ["apply", "screen", "offer"]


def _stage(index: int, **changes):
    data = pipeline_studies.study()
    data["stages"][index] = {**data["stages"][index], **changes}
    return data


@pytest.mark.parametrize(
    ("data", "field", "message"),
    [
        (
            _stage(1, select=8),
            "stages[1].select",
            "selects 8 of a pool of 8",
        ),
        (
            _stage(1, reads={"stage": "apply", "matching": "pool", "size": 40, "within": ["job"]}),
            "stages[1].reads.size",
            "a pool of 40 is larger than the 32 documents of `applicants` per job",
        ),
        (_stage(1, population="judges"), "stages[1].population", "no population named `judges`"),
        (
            _stage(1, reads={"stage": "aply", "matching": "single"}),
            "stages[1].reads.stage",
            "no stage named `aply`",
        ),
        (
            _stage(
                2, reads={"stage": "apply", "after": "apply", "matching": "pool", "draw": "carry"}
            ),
            "stages[2].reads.after",
            "`apply` does not read the documents of `apply`",
        ),
        (
            _stage(1, reads={"stage": "apply", "matching": "pair", "differ_in": "age"}),
            "stages[1].reads.differ_in",
            "`age` is not a persona axis",
        ),
        (
            _stage(
                1, reads={"stage": "apply", "matching": "pool", "size": 3, "draw": "stratified"}
            ),
            "stages[1].reads.size",
            "a stratified pool must hold each of the 4 groups",
        ),
        (_stage(0, population="screeners"), "stages[0].reads", "the stage must say what they read"),
    ],
)
def test_bad_pipelines_exit_2_naming_file_line_and_field(
    tmp_path: Path, cli, data, field, message
) -> None:
    path = pipeline_studies.write(tmp_path / "s.yaml", data)
    result = cli.invoke(app, ["run", str(path), "--out", str(tmp_path / "run")])
    assert result.exit_code == 2, result.output
    assert f"{path}:" in result.stderr and field in result.stderr, result.stderr
    assert message in result.stderr, result.stderr
    assert not (tmp_path / "run").exists()


def test_a_cycle_is_rejected(tmp_path: Path, cli) -> None:
    data = pipeline_studies.study(analyses=[])
    first, second = (
        {
            "name": name,
            "population": "screeners",
            "role": "screener",
            "reads": {"stage": "apply", "matching": "single", **after},
            "output": {"decision": {"type": "choice", "choices": ["yes", "no"]}},
            "advance": "decision == 'yes'",
            "prompt": "{{ document.text }}",
        }
        for name, after in (("first", {"after": "second"}), ("second", {}))
    )
    # `first` follows `second` (after), and a screener acts in `first` before `second`.
    data["stages"] = [data["stages"][0], first, second]
    path = pipeline_studies.write(tmp_path / "s.yaml", data)
    result = cli.invoke(app, ["validate", str(path)])
    assert result.exit_code == 2
    assert "the stages form a cycle: first -> second -> first" in result.stderr or (
        "the stages form a cycle: second -> first -> second" in result.stderr
    ), result.stderr
    assert f"{path}:" in result.stderr


def test_validate_counts_each_population_and_the_expected_units(tmp_path: Path, cli) -> None:
    path = pipeline_studies.write(tmp_path / "s.yaml", pipeline_studies.study())
    result = cli.invoke(app, ["validate", str(path)])
    assert result.exit_code == 0, result.output
    # 64 letters, 64 / 8 screening pools, one offer per shortlist.
    text = " ".join(result.stdout.split())
    assert "64 applicants, 2 screeners, 1 managers, 80 unit(s)" in text
