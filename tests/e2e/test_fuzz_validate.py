"""A seeded mutator feeds thousands of broken study files to ``validate``: every one ends in
exit 0 or exit 2 with a message, never a traceback."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from typer.testing import CliRunner

from biasim.simulator.cli import app
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
    "\n  - ",
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


@pytest.mark.slow
def test_mutated_study_files_are_exit_0_or_2_never_a_traceback(tmp_path: Path) -> None:
    rng = random.Random(17)
    runner = CliRunner()
    study = tmp_path / "s.yaml"
    codes = {0: 0, 2: 0}
    for i in range(2500):
        text = mutate(BASE, rng)
        study.write_text(text, encoding="utf-8")
        result = runner.invoke(app, ["validate", str(study)])
        assert result.exit_code in (0, 2), (i, text, result.exception, result.output)
        assert "Traceback" not in result.output
        if result.exit_code == 2:
            assert result.stderr.startswith("error "), (i, text, result.stderr)
        codes[result.exit_code] += 1
    # The mutator must reach both sides, or it tests nothing.
    assert codes[0] > 100 and codes[2] > 1000, codes
