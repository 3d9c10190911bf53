"""The older single-entry form of the seed-004 analysis, kept for one release.

A ``demographic_parity`` entry used to carry ``condition:`` comparisons, ``explicit:``,
``terms:`` and ``predictions:``; each is now a kind of its own over the same stage
(``condition_differences``, ``explicit_bias``, ``rationale_terms``, ``predictions_check``).
Loading rewrites such an entry into the new entries, with the same stage fields and the same
name, so a run writes the tables and figures it wrote before, and says so in one deprecation
line per entry. The new entries go at the end of ``analyses``, so every entry the user wrote
keeps its index (and its default name ``analysisN``)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from biasim.simulator.common.yamlsource import SourceMap
from biasim.simulator.study.analysis_spec import DEFAULT_KIND
from biasim.simulator.study.decisions_spec import STAGE_FIELDS

#: Each option of the older form -> the kind that now does it.
OLD_OPTIONS = {
    "condition": "condition_differences",
    "explicit": "explicit_bias",
    "terms": "rationale_terms",
    "predictions": "predictions_check",
}


@dataclass(frozen=True)
class Expansion:
    """A study document with its older-form entries rewritten.

    Attributes:
        data: The document.
        smap: Its source map: each new entry is located where the entry it came from was.
        moved: How a problem names each new entry: ``analyses[3]`` -> ``analyses[0]``.
        deprecations: One line per rewritten entry: file, line, and the new form.
    """

    data: Any
    smap: SourceMap
    moved: dict[str, str]
    deprecations: tuple[str, ...]


def _name(entry: dict[str, Any], index: int) -> str:
    name = entry.get("name")
    return name if isinstance(name, str) else f"analysis{index + 1}"


def _older_options(entry: Any, index: int, compared: set[str]) -> list[str]:
    """The older-form options a ``demographic_parity`` entry carries. Its ``condition`` is
    still the core's case split; it is the older form only where no ``condition_differences``
    entry of the same name compares the levels. A recorded study writes every field, unset
    ones as null: those are not options."""
    if not isinstance(entry, dict) or (entry.get("kind") or DEFAULT_KIND) != DEFAULT_KIND:
        return []
    found = [key for key in OLD_OPTIONS if entry.get(key) is not None]
    if "condition" in found and _name(entry, index) in compared:
        found.remove("condition")
    return found


def expand_decisions(data: Any, smap: SourceMap) -> Expansion:
    """``data`` with every older-form ``demographic_parity`` entry split into its kinds."""
    analyses = data.get("analyses") if isinstance(data, dict) else None
    if not isinstance(analyses, list):
        return Expansion(data, smap, {}, ())
    compared = {
        _name(e, i)
        for i, e in enumerate(analyses)
        if isinstance(e, dict) and e.get("kind") == OLD_OPTIONS["condition"]
    }
    kept: list[Any] = []
    added: list[tuple[int, dict[str, Any]]] = []
    lines: list[str] = []
    for i, entry in enumerate(analyses):
        found = _older_options(entry, i, compared)
        if not found:
            kept.append(entry)
            continue
        shared = {k: v for k, v in entry.items() if k in STAGE_FIELDS}
        kept.append({k: v for k, v in entry.items() if k not in OLD_OPTIONS or k == "condition"})
        name = _name(entry, i)
        for key in found:
            new = {"kind": OLD_OPTIONS[key], "name": name, **shared}
            if key != "condition":
                new[key] = entry[key]
            added.append((i, new))
        lines.append(_deprecation(smap, i, name, found))
    if not added:
        return Expansion(data, smap, {}, ())
    moved = {f"analyses[{len(kept) + j}]": f"analyses[{i}]" for j, (i, _) in enumerate(added)}
    new_data = {**data, "analyses": [*kept, *(entry for _, entry in added)]}
    origins = [i for i, _ in added]
    return Expansion(new_data, _located(smap, len(kept), origins), moved, tuple(lines))


def _located(smap: SourceMap, start: int, origins: list[int]) -> SourceMap:
    """``smap`` with each new entry (``analyses[start + j]``) located where entry
    ``origins[j]`` was written."""
    tables = []
    for table in (smap.locations, smap.text_lines):
        out = dict(table)
        for j, origin in enumerate(origins):
            for path, value in table.items():
                if path[:2] == ("analyses", origin):
                    out[("analyses", start + j, *path[2:])] = value
        tables.append(out)
    # `replace` keeps the map's own kind (a generated persona writer's names its fields).
    return dataclasses.replace(smap, locations=tables[0], text_lines=tables[1])


def _deprecation(smap: SourceMap, index: int, name: str, found: list[str]) -> str:
    """One line: where the older-form entry is and what to write instead."""
    file, line = smap.locate(("analyses", index))
    at = f"{file}:{line}" if line else file
    options = ", ".join(f"`{key}:`" for key in found)
    kinds = ", ".join(
        f"`kind: {OLD_OPTIONS[k]}`" + ("" if k == "condition" else f" with `{k}:`") for k in found
    )
    return (
        f"{at}: analyses[{index}]: {options} in a demographic_parity analysis is deprecated "
        f"and goes in the next release; write each as an analysis of its own with the same "
        f"stage fields (stage, field, target, by, cases, condition, unit) and `name: {name}`: "
        f"{kinds}"
    )
