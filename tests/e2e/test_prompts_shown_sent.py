"""The prompt shown is the prompt sent: for every built-in study (policies included), each
distinct prompt that ``biasim validate --show-prompts`` prints and the report's Prompts section
shows is one the run stored in ``calls.sqlite``, with the model-written parts (documents,
written names, earlier answers) as placeholders; every reading stage shows the pool sizes its
calls showed; stages are numbered as the study file numbers them."""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

import pytest
from typer.testing import CliRunner

from biasim.scenarios import builtin_studies
from biasim.simulator.cli import app
from biasim.simulator.engine import runner
from biasim.simulator.engine.runner import RunOptions, execute, prepare
from biasim.simulator.study.options import StudyOptions, load_options_study
from biasim.simulator.study.prompts import distinct_prompts
from tests.builtin_runs import AGENTS, NEEDS_INPUT

#: Stand-ins the shown prompts hold for what only the run knows (documents, names, answers).
PLACEHOLDER = re.compile(
    r"\[document \d+, written in stage `[^`]+` at run time"
    r"(?:; its author's name replaced by \[name withheld\])?\]"
    r"|\[name of applicant \d+\]"
    r"|\[a name of the other [^\]]+\]"
    r"|\[\w+ written in stage `[^`]+` at run time\]"
)


def _pattern(shown: str) -> re.Pattern[str]:
    """``shown`` as a pattern the sent text must match, a placeholder matching any text."""
    parts, last = [], 0
    for found in PLACEHOLDER.finditer(shown):
        parts += [re.escape(shown[last : found.start()]), r"(?s:.*?)"]
        last = found.end()
    parts.append(re.escape(shown[last:]))
    return re.compile("".join(parts), re.DOTALL)


def _drawn(study: object) -> dict[str, re.Pattern[str]]:
    """Pairing stage -> the names and items each call draws anew (an example draw is shown),
    and in a market every stage -> the people's names: both sides compare with them masked."""
    found = {}
    for stage in study.config.stages:  # type: ignore[attr-defined]
        if stage.pairing is not None:
            spec = stage.pairing
            words = {n for names in spec.targets.names.values() for n in names}
            words |= {row[spec.item_column] for row in spec.rows}
            alternatives = "|".join(re.escape(w) for w in sorted(words, key=len, reverse=True))
            found[stage.name] = re.compile(rf"(?<!\w)(?:{alternatives})(?!\w)")
    if study.config.market is not None:  # type: ignore[attr-defined]
        # Who applies is drawn each cycle from the people out of work, so the persona whose
        # prompt is shown may hold a job all run: the writer's name is drawn, like a pair's.
        names = {n for bank in study.config.personas.names.values() for n in bank}  # type: ignore[attr-defined]
        alternatives = "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))
        for stage in study.config.stages:  # type: ignore[attr-defined]
            found.setdefault(stage.name, re.compile(rf"(?<!\w)(?:{alternatives})(?!\w)"))
    return found


def _masked(mask: re.Pattern[str] | None, text: str) -> str:
    return mask.sub("<drawn>", text) if mask is not None else text


def _sent(out: Path) -> dict[str, list[tuple[str, int]]]:
    """Stage -> every message the run sent in it, each with the number of documents shown."""
    with sqlite3.connect(out / "calls.sqlite") as db:
        rows = db.execute("SELECT stage, request FROM calls WHERE reask = 0").fetchall()
    sent: dict[str, list[tuple[str, int]]] = {}
    for stage, request in rows:
        material = json.loads(request)
        for message in material["messages"]:
            sent.setdefault(stage, []).append((message["content"], len(material.get("shown", []))))
    return sent


def _run(name: str, out: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The statistics read the results, not the prompts: skipped for time.
    monkeypatch.setattr(runner, "_analysis_summary", lambda *args: {})
    options = RunOptions(study=name, out=out, backend="synthetic", agents=AGENTS.get(name, 1))
    execute(prepare(options))


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(set(builtin_studies()) - NEEDS_INPUT))
def test_every_prompt_shown_is_a_prompt_sent(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "run"
    _run(name, out, monkeypatch)
    study = load_options_study(StudyOptions(study=name, agents=AGENTS.get(name, 1)))
    shown = distinct_prompts(study)
    sent = _sent(out)
    assert {p.stage for p in shown} == set(sent)
    drawn = _drawn(study)
    for prompt in shown:
        if ".completion." in prompt.field:
            continue  # sent to completion models only; every synthetic role answers structured
        mask = drawn.get(prompt.stage)
        pattern = _pattern(_masked(mask, prompt.text))
        texts = sent[prompt.stage]
        assert any(pattern.fullmatch(_masked(mask, text)) for text, _ in texts), (
            prompt.field,
            prompt.text,
        )
    # The report shows the manifest's samples: each one of the prompts shown.
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    every = {(p.field, p.text) for p in shown}
    assert manifest["prompts"] and all(
        (p["field"], p["text"]) in every for p in manifest["prompts"]
    )
    # A reading stage shows each number of documents its calls showed, and no other.
    for stage in {p.stage for p in shown if PLACEHOLDER.search(p.text)}:
        documents = {n for _, n in sent[stage]}
        if documents - {0}:
            sizes = {len(re.findall(r"\[document \d+,", p.text)) for p in shown if p.stage == stage}
            assert sizes == documents, stage


def test_the_policies_offer_stages_show_the_shortlists_they_send() -> None:
    """The built-in policy study: the manager reads the screener's 3 (as is, redacted) or 5
    (shortlist5), never 2; the headers number stages as the file does."""
    result = CliRunner().invoke(app, ["validate", "hiring_policies", "--show-prompts"])
    assert result.exit_code == 0, result.output
    headers = re.findall(r"^== (.+?) \(", result.output, re.MULTILINE)
    assert headers[0] == "stages[0].prompt"
    offers = re.findall(r"I have (\d+) applicants\. Can you tell me", result.output)
    assert sorted(set(offers)) == ["3", "5"]
    for policy, size in (("redacted", 3), ("shortlist5", 5)):
        block = result.output.split(f"policies.{policy}.stages.offer.prompt")[1]
        assert f"I have {size} applicants" in block.split("\n== ")[0]


def test_the_persona_writer_is_named_and_its_answers_are_placeholders() -> None:
    result = CliRunner().invoke(app, ["validate", "persona_ablation", "--show-prompts"])
    assert result.exit_code == 0, result.output
    headers = re.findall(r"^== (\S+)", result.output, re.MULTILINE)
    assert headers[0] == "personas.writer.prompt" and "stages[0].prompt" in headers
    assert "stages[1].prompt" not in headers  # the file has one stage
    assert "[name written in stage `persona` at run time]" in result.output
    assert "\ntext\n" not in result.output
