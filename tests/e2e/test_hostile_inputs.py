"""Hostile or mistaken study files: each stops at once with exit 2 naming the limit, inside a
memory cap (so a regression fails fast instead of eating the machine), and writes nothing."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import write_study

#: Address-space cap for each child: the interpreter with pandas, pyarrow and matplotlib
#: imported stays well under it; any payload that expands would not.
MEMORY_CAP = 3 * 1024**3


def _capped() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))


def biasim(*args: str, cwd: Path, env: dict[str, str] | None = None):
    return subprocess.run(
        [sys.executable, "-m", "biasim", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
        preexec_fn=_capped,
        env={**os.environ, **(env or {})},
    )


def _alias_bomb() -> str:
    lines = ['a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, 10):
        prev, name = chr(ord("a") + i - 1), chr(ord("a") + i)
        lines.append(f"{name}: &{name} [{', '.join(['*' + prev] * 9)}]")
    return "\n".join(lines) + "\n"


#: 60 more crossed axes of 10 values each (6.5 KB that would build 10**60 personas).
AXES = "".join(f"    a{i}: [{', '.join(f'v{j}' for j in range(10))}]\n" for i in range(60))
STAGE = """\
  - name: s{i}
    role: decider
    prompt: x
    output: {{decision: {{type: choice, choices: [Evacuate, Stay]}}}}
"""


def _prompt(expression: str):
    return lambda text: text.replace("{{ scenario }}", expression)


CASES = {
    "alias bomb": (lambda t: _alias_bomb(), "more than 200,000 values"),
    "deep nesting": (lambda t: "name: " + "[" * 5000 + "]" * 5000 + "\n", "nesting deeper"),
    "NUL byte": (lambda t: t.replace("seed: 7", "seed: 7\x00"), ":3: invalid YAML: a NUL byte"),
    "huge string": (_prompt("{{ 'a' * 4000000000 }}"), "beyond the template limit of 1,000,000"),
    "huge power": (_prompt("{{ 7 ** 1000000000 }}"), "beyond the template limit of 4096 bits"),
    "huge width": (_prompt("{{ '%0999999999d' % 1 }}"), "format width of a million"),
    "huge filter": (_prompt("{{ 'x' | center(4000000000) }}"), "the argument 4000000000"),
    "huge range": (_prompt("{{ range(10 ** 12) | list }}"), "the argument 1000000000000"),
    "doubling macro": (
        _prompt(
            "{% macro f(n, s) %}{{ f(n - 1, s ~ s) if n else s }}{% endmacro %}{{ f(60, 'ab') }}"
        ),
        "a text longer than the template limit of 1,000,000",
    ),
    "output of a loop": (
        _prompt("{% set a = 'x' * 900000 %}{% for i in range(100000) %}{{ a }}{% endfor %}"),
        "a text longer than the template limit of 1,000,000",
    ),
    "concatenation": (
        _prompt("{% set a = 'x' * 900000 %}{{ a ~ a ~ a ~ a }}"),
        "a text longer than the template limit of 1,000,000",
    ),
    "huge design": (
        lambda t: t.replace("agents_per_value: 20", "agents_per_value: 1000000000"),
        "design.agents_per_value: the design has 3,000,000,000 agents, more than the limit of",
    ),
    "negative seed": (lambda t: t.replace("seed: 7", "seed: -1"), ":3: seed: Input should be"),
    "markup in a key": (lambda t: t + '"[/foo]": 1\n', "[/foo]: unknown field"),
    "huge file": (lambda t: t + "#" * 1_000_001 + "\n", "larger than the limit of 1,000,000 bytes"),
    "60 crossed axes": (
        lambda t: t.replace("    gender: [", AXES + "    gender: ["),
        "personas: crossing the 61 axes gives about 10^60 persona combinations, more than the "
        "limit of 10,000",
    ),
    "5,000 stages": (
        lambda t: t.replace(
            "stages:\n", "stages:\n" + "".join(STAGE.format(i=i) for i in range(5000))
        ),
        "stages: the study has 5,001 stages, more than the limit of 100",
    ),
    "lipsum": (_prompt("{{ lipsum(n=1000000) }}"), "lipsum() is not available in a study"),
    "20,000 nested brackets": (
        _prompt("{{ " + "(" * 20_000 + "1" + ")" * 20_000 + " }}"),
        "the template nests more than 20 levels deep",
    ),
    "20,000 nested blocks": (
        _prompt("{% if 1 %}" * 20_000 + "{% endif %}" * 20_000),
        "the template nests more than 20 levels deep",
    ),
    "max_length 10**30": (
        lambda t: t.replace("max_length: 80", f"max_length: {10**30}"),
        "max_length: 1,000,000,000,000,000,000,000,000,000,000 characters is more than the "
        "limit of 1,000,000",
    ),
}


# One capped child checks every case in-process (an interpreter start costs seconds here).
CHILD = """
import json, sys
from typer.testing import CliRunner
from biasim.simulator.cli import app
out = {}
for study, run_dir in json.loads(sys.argv[1]):
    runner = CliRunner()
    ran = runner.invoke(app, ["run", study, "--out", run_dir])
    checked = runner.invoke(app, ["validate", study])
    out[study] = [ran.exit_code, ran.stderr, checked.exit_code, repr(ran.exception)]
print(json.dumps(out))
"""


def test_hostile_studies_are_exit_2_naming_the_limit(tmp_path: Path) -> None:
    jobs = []
    for i, (edit, _) in enumerate(CASES.values()):
        study = write_study(tmp_path / f"s{i}.yaml")
        study.write_text(edit(study.read_text()))
        jobs.append((str(study), str(tmp_path / f"run{i}")))
    child = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(jobs)],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=_capped,
    )
    assert child.returncode == 0, child.stderr[-3000:]
    results = json.loads(child.stdout)
    for (case, (_, expected)), (study, run_dir) in zip(CASES.items(), jobs, strict=True):
        ran_code, stderr, validate_code, exception = results[study]
        assert (ran_code, validate_code) == (2, 2), (case, stderr, exception)
        assert expected in stderr, (case, stderr)
        assert not Path(run_dir).exists(), case


def test_special_files_are_refused_not_read(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    result = biasim("validate", str(fifo), cwd=tmp_path)
    assert result.returncode == 2 and f"{fifo}: not a regular file" in result.stderr
    study = tmp_path / "s.yaml"
    study.write_text("extends: /dev/zero\n")
    result = biasim("validate", str(study), cwd=tmp_path)
    assert result.returncode == 2
    assert f"{study}:1: extends: /dev/zero: not a regular file" in result.stderr


def test_the_design_limit_is_stated_and_can_be_raised(tmp_path: Path) -> None:
    study = write_study(tmp_path / "s.yaml", agents=2)
    ok = biasim("validate", str(study), cwd=tmp_path)
    assert ok.returncode == 0 and "design limit 5,000,000 agents (BIASIM_MAX_AGENTS" in ok.stdout
    low = biasim("validate", str(study), cwd=tmp_path, env={"BIASIM_MAX_AGENTS": "5"})
    assert low.returncode == 2 and "the design has 6 agents, more than the limit of 5" in low.stderr


def test_user_text_is_printed_literally(tmp_path: Path) -> None:
    study = write_study(tmp_path / "s.yaml")
    study.write_text(study.read_text() + '":x: [blink]on[/blink] [bold]": 1\n')
    result = biasim("validate", str(study), cwd=tmp_path)
    assert result.returncode == 2
    assert ":x: [blink]on[/blink] [bold]: unknown field" in result.stderr


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["analyze", "--permutations", "0", "--decisions", "d.csv"], "--permutations"),
        (["analyze", "--seed", "-1", "--decisions", "d.csv"], "--seed"),
        (["power", "s.yaml", "--seed", "-1"], "--seed"),
        (["run", "s.yaml", "--seed", "-1", "--out", "run"], "--seed: seed: Input should be"),
    ],
)
def test_bad_numbers_on_the_command_line_are_exit_2(tmp_path: Path, args, expected) -> None:
    write_study(tmp_path / "s.yaml", agents=2)
    (tmp_path / "d.csv").write_text("g,decision\na,accept\nb,reject\n")
    result = biasim(*args, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert expected in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "run").exists()
