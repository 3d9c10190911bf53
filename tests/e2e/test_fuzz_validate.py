"""A seeded mutator feeds thousands of broken study files to ``validate``: every one ends in
exit 0 or exit 2 with a message, never a traceback (hostile payloads among the pieces: an alias,
a huge power, a huge repeat, a 4,300-digit-scale number)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from typer.testing import CliRunner

from biasim.simulator.cli import app
from biasim.simulator.common.errors import InputError
from biasim.simulator.engine.runner import RunOptions
from biasim.simulator.study.options import load_options_study
from tests.conftest import SYNTHETIC_STUDY

BASE = SYNTHETIC_STUDY.format(agents=2, replicates=1, latency_ms=0, concurrency=2)
# Characters YAML, Jinja and rich give meaning to, plus a NUL and numbers at their edges.
PIECES = [
    *"{}[]:&*!|>-#'\"%\n\t\x00@`,",
    "{{",
    "}}",
    "{%",
    "%}",
    " -1",
    " 0",
    " 1e308",
    " 99999999999999999999",
    " null",
    " ~",
    " [/x]",
    " :x:",
    " &a",
    " *a",
    " !!python/object:os.system",
    "{{ 7 ** 99999 }}",
    "{{ 'a' * 9999999 }}",
    "{% for i in range(99999) %}{% for j in range(99999) %}{% endfor %}{% endfor %}",
    "{{ ('x\\n' * 99999) | indent(999999) }}",
    " " + "9" * 4400,
    "\n  - ",
    # Issue 44: random unbounded text, nesting past Python's stack, a number past a machine
    # integer (`max_length`), a stage more.
    "{{ lipsum(n=1000000) }}",
    "{{ " + "(" * 20_000 + "1" + ")" * 20_000 + " }}",
    "{% if 1 %}" * 5_000,
    "{{ x" + " | upper" * 5_000 + " }}",
    " 1" + "0" * 30,
    "\n  - name: s\n    role: decider\n    prompt: x\n",
]


def mutate(text: str, rng: random.Random) -> str:
    """One to three edits: insert a piece, delete a span, duplicate or drop a line."""
    for _ in range(rng.randint(1, 3)):
        lines = text.split("\n")
        op = rng.randrange(5)
        at = rng.randrange(len(text) + 1)
        if op == 0:
            text = text[:at] + rng.choice(PIECES) + text[at:]
        elif op == 1:
            text = text[:at] + text[at + rng.randint(1, 12) :]
        elif op == 2:
            i = rng.randrange(len(lines))
            lines.insert(i, lines[rng.randrange(len(lines))])
            text = "\n".join(lines)
        elif op == 3:
            lines.pop(rng.randrange(len(lines)))
            text = "\n".join(lines)
        else:
            i = rng.randrange(len(lines))
            lines[i] = " " * rng.randint(0, 6) + lines[i].lstrip()
            text = "\n".join(lines)
    return text


#: Every this-many refused file also goes through the command line, to keep its formatting
#: of a refusal (exit 2, "error ...", no traceback) covered.
CLI_SAMPLE = 25
#: Every this-many file that loads is also run (synthetic answers, a few seconds each).
RUN_SAMPLE = 40


def _loads(study: Path) -> InputError | None:
    """What ``validate`` decides, in-process: None for a study that loads, else the refusal.
    Any other exception propagates (it would be a traceback at the command line)."""
    try:
        load_options_study(RunOptions(study=str(study)))
    except InputError as exc:
        return exc
    return None


def _runs_to_an_end(runner: CliRunner, study: Path, out: Path, case: object) -> None:
    """A study that validates runs without a traceback, and its manifest says how it ended
    (never `running`)."""
    result = runner.invoke(app, ["run", str(study), "--out", str(out)])
    assert result.exit_code in (0, 2, 3), (case, result.exception, result.output)
    assert "Traceback" not in result.output, case
    manifest = out / "manifest.json"
    if manifest.exists():
        assert json.loads(manifest.read_text())["status"] != "running", case


@pytest.mark.slow
def test_mutated_study_files_are_exit_0_or_2_never_a_traceback(tmp_path: Path) -> None:
    # Loading is checked in-process for every file (typer builds its command anew on each
    # invoke, ten times the cost of the check itself); the command line runs for every file
    # that loads (its summary and notes print only then) and for a sample of the refused ones.
    rng = random.Random(17)
    runner = CliRunner()
    study = tmp_path / "s.yaml"
    codes = {0: 0, 2: 0}
    for i in range(2500):
        text = mutate(BASE, rng)
        study.write_text(text, encoding="utf-8")
        refused = _loads(study)
        if refused is not None:
            assert refused.problems and all(p.message for p in refused.problems), (i, text)
            codes[2] += 1
            if codes[2] % CLI_SAMPLE:
                continue
        result = runner.invoke(app, ["validate", str(study)])
        assert result.exit_code == (2 if refused else 0), (i, text, result.exception, result.output)
        assert "Traceback" not in result.output
        if result.exit_code == 2:
            assert result.stderr.startswith("error "), (i, text, result.stderr)
        else:
            codes[0] += 1
            if codes[0] % RUN_SAMPLE == 0:
                _runs_to_an_end(runner, study, tmp_path / f"run{i}", (i, text))
    # The mutator must reach both sides, or it tests nothing.
    assert codes[0] > 100 and codes[2] > 1000, codes
