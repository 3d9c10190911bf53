"""Each kind's codebook (``<module>.tables.yaml``) builds the tables its module renders: every
table it declares is one its code renders, no column is written out twice (a column several
tables show is a group or a shared column), and a codebook written wrong is named by file,
line and field."""

from __future__ import annotations

import importlib
import re
import sys
import textwrap
import types
from collections import Counter
from pathlib import Path

import pytest
import yaml

from biasim.simulator.common.errors import InputError
from biasim.simulator.common.result_tables import ResultTable
from biasim.simulator.kinds.sections.codebook import (
    _TABLE_FIELDS,
    SHARED,
    shared_arguments,
    tables_of,
)

ROOT = Path(__file__).resolve().parents[3]
CODEBOOKS = sorted(
    p for folder in ("simulator/kinds", "families") for p in (ROOT / folder).rglob("*.tables.yaml")
)


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").with_suffix("").parts
    return "biasim." + ".".join(parts)


def test_there_are_codebooks() -> None:
    assert len(CODEBOOKS) >= 1


def _readers(module: str) -> str:
    """The code of ``module`` and of the modules that read its ``TABLES``."""
    own = ROOT / Path(*module.split(".")[1:]).with_suffix(".py")
    found = [own.read_text(encoding="utf-8")]
    for path in ROOT.joinpath("simulator").rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        imported = rf"from {re.escape(module)} import[^)]*\bTABLES\b"
        if re.search(imported, text) or f"{module.rsplit('.', 1)[1]}.TABLES[" in text:
            found.append(text)
    return "\n".join(found)


@pytest.mark.parametrize("path", CODEBOOKS, ids=lambda p: p.name)
def test_every_table_of_a_codebook_is_one_its_code_renders(path: Path) -> None:
    module = _module(path)
    code = _readers(module)
    used = set(re.findall(r'TABLES\["(\w+)"\]|tables_of\(__name__\)\["(\w+)"\]', code))
    used_keys = {key for pair in used for key in pair if key}
    declared = set(tables_of(importlib.import_module(module).__name__))
    assert declared <= used_keys, f"declared in {path.name} but not used: {declared - used_keys}"


def test_no_column_is_written_out_twice() -> None:
    written = Counter()
    for path in CODEBOOKS:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
        lists = [*(doc.get("groups") or {}).values()]
        lists += [t.get("columns") or [] for t in (doc.get("tables") or {}).values()]
        for columns in lists:
            written.update(tuple(map(str, c)) for c in columns if isinstance(c, list))
    twice = [column for column, times in written.items() if times > 1]
    assert not twice, f"write these once, as a group or a shared column: {twice}"


def _load(tmp_path: Path, text: str) -> dict[str, ResultTable]:
    (tmp_path / "toy_kind.py").write_text("", encoding="utf-8")
    (tmp_path / "toy_kind.tables.yaml").write_text(text, encoding="utf-8")
    module = types.ModuleType("toy_kind")
    module.__file__ = str(tmp_path / "toy_kind.py")
    sys.modules["toy_kind"] = module
    try:
        return tables_of("toy_kind")
    finally:
        del sys.modules["toy_kind"]


def test_groups_and_shared_columns_expand(tmp_path: Path) -> None:
    tables = _load(
        tmp_path,
        "groups:\n  units:\n    - ['n_{what}', '{what}s', int, '{what}s read.']\n"
        "tables:\n  t:\n    title: a {positive} table\n    description: D.\n    columns:\n"
        "      - {group: units, what: pair}\n      - {shared: p_value, how: Sign test.}\n",
    )
    table = tables["t"]
    assert [c.key for c in table.columns] == ["n_pair", "p_value"]
    assert table.columns[0].label == "pairs" and table.columns[1].description == "Sign test."
    assert table.named(positive="women").title == "a women table"


_T = "tables:\n  t:\n    title: T\n    description: D\n    columns:\n"


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        (_T + "      - [a, no, int]\n", 6, "its header False is not text"),
        (_T + "      - {group: x}\n", 6, "no group 'x'"),
        (
            "tables:\n  t:\n    title: T\n    notes: N\n    description: D\n",
            4,
            "did you mean 'note'",
        ),
        (_T + "      - {shared: p_valeu}\n", 6, "did you mean 'p_value'"),
        (_T + "      - [a, b, int, d, e, f]\n", 6, "6 items"),
        (_T + "      - [a, b, 1f, d]\n", 6, "format '1f' is not one of"),
        (_T + "      - [a, b, ci, d]\n", 6, "{upper: KEY}"),
        ("tables:\n  t:\n    description: D\n", 2, "needs `title:`"),
        ("tables:\n  - t\n", None, "a codebook is a mapping with `tables:`"),
        ("", None, "a codebook is a mapping with `tables:`"),
    ],
)
def test_a_codebook_written_wrong_names_its_line(
    tmp_path: Path, text: str, line: int | None, words: str
) -> None:
    with pytest.raises(InputError) as caught:
        _load(tmp_path, text)
    problem = caught.value.problems[0]
    assert problem.file.endswith("toy_kind.tables.yaml") and problem.line == line
    assert words in str(caught.value), str(caught.value)


def test_a_missing_codebook_or_table_is_named(tmp_path: Path) -> None:
    module = types.ModuleType("toy_kind")
    module.__file__ = str(tmp_path / "toy_kind.py")
    sys.modules["toy_kind"] = module
    try:
        with pytest.raises(InputError, match=r"no codebook beside toy_kind.*package-data"):
            tables_of("toy_kind")
    finally:
        del sys.modules["toy_kind"]
    tables = _load(tmp_path, "tables:\n  gap:\n    title: T\n    description: D\n")
    with pytest.raises(KeyError, match="declares no table 'gaps' \\(it declares \\['gap'\\]"):
        tables["gaps"]


GUIDE = ROOT / "docs" / "extending" / "kinds.md"


def test_the_guides_codebooks_load_and_its_table_lists_every_shared_column(
    tmp_path: Path,
) -> None:
    text = GUIDE.read_text(encoding="utf-8")
    blocks = re.findall(r"```yaml\n( *# codebook of .*?)```", text, re.DOTALL)
    assert len(blocks) == 2
    for block in blocks:
        assert _load(tmp_path, textwrap.dedent(block))
    rows = {
        name: [set(re.findall(r"`(\w+)`", cell)) for cell in cells.split("|")]
        for name, cells in re.findall(r"^ *\| `(\w+)` \|(.*)\|$", text, re.MULTILINE)
    }
    assert set(rows) == set(SHARED), set(rows) ^ set(SHARED)
    for name, (required, optional, keys, _) in rows.items():
        assert [required, optional] == list(map(set, shared_arguments(name))), name
        # Each argument given its own name, as the table's "the `low` given" says.
        made = SHARED[name](**{a: a for a in shared_arguments(name)[0]})
        columns = made if isinstance(made, tuple) else (made,)
        produced = {c.key for c in columns} | {c.upper for c in columns if c.upper}
        assert produced <= keys, (name, produced - keys)


def test_a_shared_column_given_too_little_or_a_stray_argument_says_so_in_codebook_words(
    tmp_path: Path,
) -> None:
    with pytest.raises(InputError) as caught:
        _load(tmp_path, _T + "      - {shared: rate, what: Share., key: share}\n")
    problem = caught.value.problems[0]
    assert problem.file.endswith("toy_kind.tables.yaml") and problem.line == 6
    assert "shared column `rate` needs `how:` (it takes `what:`, `how:` (required)" in str(
        caught.value
    )
    assert "TypeError" not in str(caught.value) and "positional" not in str(caught.value)
    with pytest.raises(InputError, match="takes no `bond:`; did you mean `bounds`"):
        _load(tmp_path, _T + "      - {shared: rate, what: S., how: W., bond: share}\n")
    with pytest.raises(InputError, match="`impact_ratio` takes no `how:` \\(it takes no arg"):
        _load(tmp_path, _T + "      - {shared: impact_ratio, how: W.}\n")


def test_the_guide_names_every_table_field_a_codebook_may_set() -> None:
    text = GUIDE.read_text(encoding="utf-8")
    said = text[text.index("The other table fields") : text.index("A codebook written wrong")]
    others = _TABLE_FIELDS - {"title", "description", "note"}
    assert others <= set(re.findall(r"`(\w+)", said)), others - set(re.findall(r"`(\w+)", said))
