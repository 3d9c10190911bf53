"""Loading a study: its file and ``extends:`` chain, command-line overrides, and full validation.

A study is validated in three passes, each reporting every problem it finds: the schema
(:mod:`.config`, each analysis against its own kind's spec, found by name in
:data:`biasim.registry.KINDS`), then the checks the schema cannot make (:mod:`.checks`).
"""

from __future__ import annotations

import copy
import dataclasses
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from biasim.registry import (
    KINDS,
    MissingExtra,
    PluginNotLoaded,
    UnknownPlugin,
    load_families,
    load_family,
)
from biasim.simulator.common.errors import InputError, Problem
from biasim.simulator.common.yamlsource import FieldPath, SourceMap
from biasim.simulator.study.analysis_spec import DEFAULT_KIND, AnalysisSpec
from biasim.simulator.study.checks import check_study
from biasim.simulator.study.config import Study, StudyConfig
from biasim.simulator.study.decisions_compat import expand_decisions
from biasim.simulator.study.files import load_with_extends, read_data_files
from biasim.simulator.study.hints import nearest, pattern_message
from biasim.simulator.study.persona_writer import collapse_generated, expand_generated
from biasim.simulator.study.pipeline_checks import check_policies
from biasim.simulator.study.policy_copies import expand_policies, locate_copies


def study_json_schema() -> dict[str, Any]:
    """The JSON Schema of study files, for editors, with an entry for every kind that loads
    (a broken plug-in kind is left out: ``KINDS.each()`` says why)."""
    load_families()  # their kinds' entries are part of the schema
    schema = StudyConfig.model_json_schema()
    kinds = []
    for kind in KINDS.each()[0]:
        spec = kind.spec.model_json_schema(ref_template="#/$defs/{model}")
        schema.setdefault("$defs", {}).update(spec.pop("$defs", {}))
        schema["$defs"][spec["title"]] = spec
        kinds.append({"$ref": f"#/$defs/{spec['title']}"})
    schema["properties"]["analyses"]["items"] = {"anyOf": kinds}
    schema["properties"]["extends"] = {
        "type": "string",
        "description": "Built-in study name or path this file overrides.",
    }
    return schema


@dataclass(frozen=True)
class Override:
    """A command-line option that replaces one field of the study.

    Attributes:
        option: The option as typed, e.g. ``--agents``; errors name it instead of a file line.
        path: Field path it sets, e.g. ``("design", "agents_per_value")``; ``"*"`` matches
            every key at that level, e.g. ``("roles", "*", "backend")``.
        value: New value.
        drop: Sibling keys to remove (options of a backend the role no longer uses).
        match: For a ``"*"`` over a list: only the entries that are mappings with these
            items, e.g. ``(("kind", "prism"),)`` for the PRISM analyses.
        requires: A section the study must have for the option to mean anything, e.g.
            ``("biographies",)``; without it the option is an input error.
    """

    option: str
    path: FieldPath
    value: Any
    drop: tuple[str, ...] = ()
    match: tuple[tuple[str, Any], ...] = ()
    requires: FieldPath = ()

    def paths(self, data: dict[str, Any]) -> list[FieldPath]:
        """Concrete paths: a ``"*"`` part stands for every key of that mapping (every role),
        or every entry of that list that has the ``match`` items (``analyses``)."""
        found: list[FieldPath] = [()]
        for part in self.path[:-1]:
            expanded: list[FieldPath] = []
            for prefix in found:
                node = _get_path(data, prefix)
                if part == "*" and isinstance(node, list):
                    expanded.extend(
                        (*prefix, i)
                        for i, item in enumerate(node)
                        if isinstance(item, dict) and all(item.get(k) == v for k, v in self.match)
                    )
                elif part == "*":
                    keys = list(node) if isinstance(node, dict) else []
                    expanded.extend((*prefix, key) for key in keys)
                else:
                    expanded.append((*prefix, part))
            found = expanded
        return [(*prefix, self.path[-1]) for prefix in found]

    def apply(self, data: dict[str, Any]) -> dict[str, Any]:
        """Return a copy of ``data`` with the override in place at each of its paths."""
        out = copy.deepcopy(data)
        for path in self.paths(data):
            node = out
            for part in path[:-1]:
                node = node.setdefault(part, {}) if isinstance(node, dict) else node[part]
            node[path[-1]] = self.value
            for key in self.drop:
                node.pop(key, None)
        return out


def _get_path(data: Any, path: FieldPath) -> Any:
    for part in path:
        if isinstance(data, list) and isinstance(part, int):
            data = data[part]
        else:
            data = data.get(part, {}) if isinstance(data, dict) else {}
    return data


def load_study(
    ref: str | Path,
    overrides: list[Override] | None = None,
    *,
    check_backends: bool = True,
) -> Study:
    """Load, merge (``extends:``), override and fully validate a study.

    Args:
        ref: A file path or the name of a built-in study.
        overrides: Command-line overrides; problems they cause name the option.
        check_backends: Also check that every role's backend is registered.

    Raises:
        InputError: Listing every problem with file, line and field.
    """
    data, smap, path = load_with_extends(ref, ())
    return validate_study(data, smap, path, overrides, check_backends=check_backends)


def validate_study(
    data: dict[str, Any],
    smap: SourceMap,
    path: str,
    overrides: list[Override] | None = None,
    *,
    check_backends: bool = True,
) -> Study:
    """Apply command-line overrides to a loaded document and validate it fully.

    Raises:
        InputError: Listing every problem with file, line and field.
    """
    for override in overrides or []:
        if override.requires and not isinstance(
            _get_path(data, override.requires[:-1]).get(override.requires[-1]), dict
        ):
            section = ".".join(map(str, override.requires))
            raise InputError(
                [
                    Problem(
                        override.option, None, "", f"the study has no `{section}` section to use it"
                    )
                ]
            )
        paths = override.paths(data)
        data = override.apply(data)
        located = SourceMap({path: (override.option, 0) for path in paths}, smap.default_file)
        smap = smap.overlay(located, data)
    data = read_data_files(data, smap)
    data, smap = expand_generated(data, smap)
    expansion = expand_decisions(data, smap)
    data, smap = expansion.data, expansion.smap
    # Each analysis is validated against its own kind's spec, so the kinds (plug-ins) are
    # found at load time and their errors keep their full field path; the study's family
    # registers its own kinds first.
    problems = _load_family(data, smap)
    raw_analyses = data.get("analyses") if isinstance(data, dict) and not problems else None
    specs, kind_problems = _parse_analyses(raw_analyses, smap)
    problems += _policy_problems(kind_problems, expansion.moved)
    try:
        config = StudyConfig.model_validate({**data, "analyses": []})
    except ValidationError as exc:
        problems = [
            smap.problem(tuple(e["loc"]), _pydantic_message(e, StudyConfig)) for e in exc.errors()
        ] + problems
    if problems:
        raise InputError(problems)
    config = config.model_copy(update={"analyses": specs})
    # The record of the run keeps the policies as written; the engine runs their copies.
    resolved = collapse_generated(config.model_dump(mode="json"))
    problems = check_policies(config, smap)
    kept: list[tuple[FieldPath, str]] = []
    if not problems:
        config = expand_policies(config)
        located, copies = locate_copies(config, smap)
        checked = check_study(
            config,
            located,
            check_backends=check_backends,
            on_render=lambda p, t, _: kept.append((p, t)),
        )
        problems = _policy_problems(checked, {**copies, **expansion.moved})
    if problems:
        raise InputError(problems)
    return Study(
        config=config,
        resolved=resolved,
        source_map=smap,
        path=path,
        rendered=tuple(kept),
        deprecations=expansion.deprecations,
    )


def _policy_problems(problems: list[Problem], copies: dict[str, str]) -> list[Problem]:
    """Problems of a policy's stage copies named as the policy (``policies.P.stages.S``), and
    of an analysis split from an older-form entry as that entry (``copies`` maps both), each
    reported once: a problem of the copied stage repeats in every copy."""
    out: list[Problem] = []
    seen: set[tuple[str, int | None, str]] = set()
    for problem in problems:
        key = (problem.file, problem.line, problem.message)
        if key in seen:
            continue
        seen.add(key)
        head, dot, rest = problem.field.partition(".")
        name = copies.get(head.partition("]")[0] + "]" if "[" in head else head)
        if name is not None:
            problem = dataclasses.replace(problem, field=name + dot + rest)
        out.append(problem)
    return out


def _load_family(data: Any, smap: SourceMap) -> list[Problem]:
    """Register the kinds, prompts and command of the study's ``family:``; a family that is
    not installed, or fails to register, is a problem at that field."""
    name = data.get("family") if isinstance(data, dict) else None
    if not isinstance(name, str):
        return []  # absent, or not a name: the schema reports it
    try:
        load_family(name)
    except UnknownPlugin as exc:
        return [smap.problem(("family",), str(exc))]
    except Exception as exc:  # a plug-in's own failure, reported where the study names it
        return [smap.problem(("family",), f"`{name}` failed to register: {exc}")]
    return []


def _parse_analyses(raw: Any, smap: SourceMap) -> tuple[list[AnalysisSpec], list[Problem]]:
    """Each entry of ``analyses:`` as its kind's spec, with every problem located."""
    if raw is None:
        return [], []
    if not isinstance(raw, list):
        return [], [smap.problem(("analyses",), "must be a list of analyses")]
    specs: list[AnalysisSpec] = []
    problems: list[Problem] = []
    for i, entry in enumerate(raw):
        if not isinstance(entry, dict):
            problems.append(smap.problem(("analyses", i), "an analysis must be a mapping"))
            continue
        name = str(entry.get("kind") or DEFAULT_KIND)
        try:
            kind = KINDS.instance(name)
        except (UnknownPlugin, MissingExtra, PluginNotLoaded) as exc:
            # Not installed, or broken (its import raised; registered under another name than
            # its spec's `kind`, so the run would look it up by that name and not find it).
            problems.append(smap.problem(("analyses", i, "kind"), str(exc)))
            continue
        try:
            specs.append(kind.spec.model_validate({**entry, "kind": kind.name}))
        except ValidationError as exc:
            problems.extend(
                smap.problem(("analyses", i, *e["loc"]), _pydantic_message(e, kind.spec))
                for e in exc.errors()
            )
    return specs, problems


def _fields_at(model: Any, loc: tuple[Any, ...]) -> list[str]:
    """The field names of the section at ``loc`` in ``model`` (empty when it is not a section
    of fixed fields, e.g. a mapping of user-named entries)."""
    for part in loc:
        if isinstance(model, type) and issubclass(model, BaseModel) and isinstance(part, str):
            field = model.model_fields.get(part)
            if field is None:
                return []
            model = field.annotation
        else:
            # A list item or a mapping value: the element type.
            args = [a for a in typing.get_args(model) if a is not type(None)]
            model = args[-1] if args else None
        model = _section(model)
    if isinstance(model, type) and issubclass(model, BaseModel):
        return list(model.model_fields)
    return []


def _section(annotation: Any) -> Any:
    """The model inside ``X | None``, ``Annotated[X, ...]``; other annotations as they are."""
    while typing.get_origin(annotation) in (typing.Union, types.UnionType, typing.Annotated):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if typing.get_origin(annotation) is typing.Annotated or len(args) == 1:
            annotation = args[0]
            continue
        models = [a for a in args if isinstance(a, type) and issubclass(a, BaseModel)]
        return models[0] if len(models) == 1 else annotation
    return annotation


def _pydantic_message(error: dict[str, Any], model: type[BaseModel]) -> str:
    if error["type"] == "extra_forbidden":
        *parent, key = error["loc"]
        return "unknown field" + nearest(str(key), _fields_at(model, tuple(parent)))
    if error["type"] == "missing":
        return "required field is missing"
    if error["type"] == "string_pattern_mismatch":
        return pattern_message(error["input"], error["ctx"]["pattern"])
    return str(error["msg"]).removeprefix("Value error, ")
