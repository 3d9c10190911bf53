"""Reading the files a study consists of: the study file with its ``extends:`` chain, and the
data files it names (a name bank, factor levels in a CSV, a pairing stage's items), read into
the document so the validated study, and the manifest that records it, is self-contained."""

from __future__ import annotations

import copy
import os
import re
from pathlib import Path
from typing import Any

from biasim.personas.namebank import NameBankError, load_name_bank
from biasim.scenarios import STUDY_FILE, builtin_path
from biasim.simulator.common.errors import InputError, Problem
from biasim.simulator.common.yamlsource import (
    MAX_STUDY_BYTES,
    FieldPath,
    SourceMap,
    deep_merge,
    load_yaml,
)
from biasim.simulator.study.biographies import read_biography_section
from biasim.simulator.study.pairing import read_items


def _data_path(smap: SourceMap, path: FieldPath, value: str) -> Path:
    """A data file named in a study: relative to the file that names it."""
    file, _ = smap.locate(path)
    candidate = Path(value)
    if not candidate.is_absolute() and file and Path(file).is_file():
        # Normalised, so messages name `scenarios/data/x.csv`, not `study/../data/x.csv`.
        candidate = Path(os.path.normpath(Path(file).parent / candidate))
    return candidate


def read_data_files(data: Any, smap: SourceMap) -> Any:
    """Replace references to data files (a name bank, factor levels in a CSV) by their content,
    so the validated study, and the manifest that records it, is self-contained."""
    if not isinstance(data, dict):
        return data
    data = copy.deepcopy(data)
    problems: list[Problem] = []
    personas = data.get("personas")
    if (
        isinstance(personas, dict)
        and isinstance(personas.get("name_bank"), str)
        and not personas.get("names")
    ):
        try:
            personas["names"] = _bank_names(personas, smap)
        except NameBankError as exc:
            located = exc.line is not None
            problems.append(
                Problem(str(exc.path), exc.line, exc.column or "", exc.reason)
                if located
                else smap.problem(("personas", "name_bank"), exc.reason)
            )
    problems.extend(read_biography_section(data, smap, _data_path))
    design = data.get("design")
    factors = design.get("factors") if isinstance(design, dict) else None
    if isinstance(factors, dict):
        for name, levels in list(factors.items()):
            if isinstance(levels, str):
                path = ("design", "factors", name)
                csv_path = _data_path(smap, path, levels)
                try:
                    factors[name] = _levels_from_csv(csv_path)
                except InputError as exc:
                    problems.extend(exc.problems)
        if not problems:
            problems.extend(_keep_only(design, smap))
    stages = data.get("stages")
    for i, stage in enumerate(stages if isinstance(stages, list) else []):
        pairing = stage.get("pairing") if isinstance(stage, dict) else None
        if isinstance(pairing, dict):
            problems.extend(_read_pairing(pairing, ("stages", i, "pairing"), smap))
    if problems:
        raise InputError(problems)
    return data


def _read_pairing(pairing: dict[str, Any], at: FieldPath, smap: SourceMap) -> list[Problem]:
    """Read a pairing stage's items CSV into ``rows`` and its name bank into ``names``."""
    problems: list[Problem] = []
    if isinstance(pairing.get("items"), str) and not pairing.get("rows"):
        try:
            pairing["rows"] = read_items(
                _data_path(smap, (*at, "items"), pairing["items"]), pairing
            )
        except InputError as exc:
            problems.extend(exc.problems)
    targets = pairing.get("targets")
    if (
        isinstance(targets, dict)
        and isinstance(targets.get("name_bank"), str)
        and not targets.get("names")
    ):
        ref = targets["name_bank"]
        local = _data_path(smap, (*at, "targets", "name_bank"), ref)
        try:
            bank = load_name_bank(local if local.exists() else ref)
            axis = str(targets.get("axis", ""))
            targets["names"] = {
                str(v): bank.names_for({axis: str(v)}) for v in targets.get("values") or []
            }
        except NameBankError as exc:
            problems.append(smap.problem((*at, "targets", "name_bank"), exc.reason))
    return problems


def _keep_only(design: dict[str, Any], smap: SourceMap) -> list[Problem]:
    """Apply ``design.only`` to the factor levels in place (inline or read from a CSV), so a
    study that extends another can keep a subset of levels the CSV marks."""
    only = design.get("only")
    if not isinstance(only, dict):
        return []  # absent, or the schema reports its type
    factors = design["factors"]
    problems: list[Problem] = []
    for name, wanted in only.items():
        at = ("design", "only", name)
        levels = factors.get(name)
        if not isinstance(levels, dict):
            problems.append(smap.problem(at, f"`{name}` is not a design factor"))
            continue
        if not isinstance(wanted, dict):
            continue
        for var, value in wanted.items():
            if not isinstance(value, str):
                problems.append(
                    smap.problem((*at, var), f'must be text, e.g. "{str(value).lower()}"')
                )
            elif not any(isinstance(v, dict) and var in v for v in levels.values()):
                problems.append(smap.problem((*at, var), f"no level of `{name}` defines `{var}`"))
        kept = {
            level: v
            for level, v in levels.items()
            if isinstance(v, dict) and all(v.get(k) == value for k, value in wanted.items())
        }
        if not kept and not problems:
            problems.append(smap.problem(at, f"no level of `{name}` has these values"))
        factors[name] = kept
    return problems


def _bank_names(personas: dict[str, Any], smap: SourceMap) -> dict[str, list[str]]:
    from biasim.personas import attribute_combinations

    ref = personas["name_bank"]
    local = _data_path(smap, ("personas", "name_bank"), ref)
    bank = load_name_bank(local if local.exists() else ref)
    axes = personas.get("axes") or {}
    if not isinstance(axes, dict):
        return {}
    for axis in axes:
        if axis not in bank.columns:
            raise NameBankError(
                f"the bank has no column for axis `{axis}`; columns: {', '.join(bank.columns)}",
                path=bank.path,
            )
    cross = personas.get("cross", True)
    return {
        "/".join(combo.values()): bank.names_for(combo)
        for combo in attribute_combinations(axes, cross=bool(cross))
    }


def _levels_from_csv(path: Path) -> dict[str, dict[str, str]]:
    import csv

    try:
        handle = path.open(encoding="utf-8", newline="")
    except OSError as exc:
        raise InputError(f"{path}: cannot read factor levels: {exc.strerror or exc}") from None
    levels: dict[str, dict[str, str]] = {}
    with handle:
        reader = csv.reader(handle)
        header = next(reader, None)
        if not header or not header[0].strip():
            raise InputError([Problem(str(path), 1, "", "needs a header: level, variables...")])
        for row in reader:
            line = reader.line_num
            if not any(cell.strip() for cell in row):
                continue
            if len(row) != len(header):
                raise InputError(
                    [Problem(str(path), line, "", f"{len(row)} fields, header has {len(header)}")]
                )
            level = row[0].strip()
            if not re.fullmatch(r"[A-Za-z0-9_.-]+", level):
                raise InputError(
                    [Problem(str(path), line, header[0], f"`{level}` is not a valid level name")]
                )
            if level in levels:
                raise InputError([Problem(str(path), line, header[0], f"`{level}` repeats")])
            levels[level] = dict(zip(header[1:], row[1:], strict=True))
    return levels


def read_study_text(path: Path, limit: int = MAX_STUDY_BYTES) -> str:
    """The text of a study (or other input) file: a regular file of at most ``limit`` bytes.

    A FIFO would block forever and ``/dev/zero`` never ends, so only regular files are opened,
    and never more than ``limit`` bytes are read.

    Raises:
        InputError: Not a regular file, too large, or not UTF-8 text (naming the file).
    """
    label = str(path)
    try:
        if not path.is_file():
            raise InputError(f"{label}: not a regular file")
        with path.open("rb") as handle:
            raw = handle.read(limit + 1)
    except OSError as exc:
        raise InputError(f"{label}: cannot read: {exc.strerror or exc}") from None
    if len(raw) > limit:
        raise InputError(f"{label}: larger than the limit of {limit:,} bytes")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{label}: not UTF-8 text (byte {exc.start})") from None


def _study_file(path: Path) -> Path | None:
    """``path`` if it is a file, its ``study.yaml`` if it is a study folder, else ``None``."""
    try:
        if path.is_dir():
            path = path / STUDY_FILE
        return path if path.exists() else None
    except (OSError, ValueError):  # a NUL byte, a name too long for the file system
        return None


def load_with_extends(ref: str | Path, chain: tuple[str, ...]) -> tuple[Any, SourceMap, str]:
    path = _study_file(Path(ref)) or builtin_path(str(ref))
    if path is None:
        raise InputError(f"{ref}: no such file and no built-in study of that name")
    label = str(path)
    if label in chain:
        raise InputError(f"{label}: `extends` forms a cycle: {' -> '.join((*chain, label))}")
    text = read_study_text(path)
    data, smap = load_yaml(text, label)
    if not isinstance(data, dict):
        raise InputError([Problem(label, 1, "", "a study file must be a YAML mapping")])
    parent = data.pop("extends", None)
    if parent is None:
        return data, smap, label
    if not isinstance(parent, str):
        raise InputError([smap.problem(("extends",), "must be a study name or a path")])
    parent_ref = parent
    if not Path(parent).is_absolute() and _study_file(path.parent / parent):
        parent_ref = str(path.parent / parent)
    try:
        base, base_map, _ = load_with_extends(parent_ref, (*chain, label))
    except InputError as exc:
        if len(exc.problems) == 1 and exc.problems[0].line is None:
            raise InputError([smap.problem(("extends",), exc.problems[0].message)]) from None
        raise
    base, base_map = _named(base, base_map)
    data, smap = _named(data, smap)
    _check_removals(base, data, smap)
    base = _without_options_of_replaced_backends(base, data)
    merged = deep_merge(base, data)
    merged_map = base_map.overlay(smap, merged)
    return (*_listed(merged, merged_map), label)


def _without_options_of_replaced_backends(base: dict[str, Any], data: dict[str, Any]) -> dict:
    """``base`` less the ``options`` of every role whose backend ``data`` changes: options
    belong to the backend they were written for (as ``--backend`` drops them), so a study that
    puts a local role on another backend is not refused for the parent's ``n_ctx``."""
    roles, changes = base.get("roles"), data.get("roles")
    if not isinstance(roles, dict) or not isinstance(changes, dict):
        return base
    kept = dict(roles)
    for name, change in changes.items():
        old = roles.get(name)
        if not (isinstance(old, dict) and isinstance(change, dict)):
            continue
        if "backend" in change and change["backend"] != old.get("backend"):
            kept[name] = {k: v for k, v in old.items() if k != "options"}
    return {**base, "roles": kept}


#: Lists of named mappings that ``extends`` merges entry by entry (matched by ``name``), so a
#: study that changes one stage writes that stage only; ``remove: true`` drops an entry.
NAMED_LISTS = ("stages",)


def _named(data: dict[str, Any], smap: SourceMap) -> tuple[dict[str, Any], SourceMap]:
    """``data`` with each named list as a mapping name -> entry (``remove: true`` as null),
    and its source map keyed alike; a list whose entries are not all named stays a list."""
    data = dict(data)
    for key in NAMED_LISTS:
        entries = data.get(key)
        names = [e.get("name") if isinstance(e, dict) else None for e in entries or []]
        if not isinstance(entries, list) or not all(isinstance(n, str) for n in names):
            continue
        if len(set(names)) != len(names):
            continue  # the schema check names the repeated stage
        data[key] = {
            n: None if e.get("remove") is True else {k: v for k, v in e.items() if k != "remove"}
            for n, e in zip(names, entries, strict=True)
        }
        smap = _rekey(smap, key, dict(enumerate(names)))
    return data, smap


def _listed(data: dict[str, Any], smap: SourceMap) -> tuple[dict[str, Any], SourceMap]:
    """The inverse of :func:`_named`: each named mapping back into a list, in order."""
    data = dict(data)
    for key in NAMED_LISTS:
        if isinstance(data.get(key), dict):
            names = list(data[key])
            data[key] = [{"name": n, **data[key][n]} for n in names]
            smap = _rekey(smap, key, {n: i for i, n in enumerate(names)})
    return data, smap


def _rekey(smap: SourceMap, key: str, mapping: dict[Any, Any]) -> SourceMap:
    """``smap`` with the part after ``key`` of each path renamed by ``mapping``."""

    def rename(path: FieldPath) -> FieldPath | None:
        if len(path) < 2 or path[0] != key:
            return path
        return (key, mapping[path[1]], *path[2:]) if path[1] in mapping else None

    def moved(table: dict[FieldPath, Any]) -> dict[FieldPath, Any]:
        out = {}
        for path, value in table.items():
            new = rename(path)
            if new is not None:
                out[new] = value
        return out

    return SourceMap(moved(smap.locations), smap.default_file, moved(smap.text_lines))


def _check_removals(base: dict[str, Any], data: dict[str, Any], smap: SourceMap) -> None:
    """A removed entry must exist in the study extended."""
    problems = [
        smap.problem((key, name, "remove"), f"the study extended has no {key[:-1]} `{name}`")
        for key in NAMED_LISTS
        if isinstance(data.get(key), dict)
        for name, entry in data[key].items()
        if entry is None and name not in (base.get(key) or {})
    ]
    if problems:
        raise InputError(problems)
