"""Checks of a study the schema alone cannot make: references between sections, names that run
out, synthetic truth that names no persona, and a dry render of every template for a sample of
agents (the third validation pass of :func:`biasim.simulator.study.config.validate_study`)."""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from jinja2 import TemplateSyntaxError, UndefinedError
from jinja2.exceptions import SecurityError

from biasim.registry import BACKENDS, KINDS, UnknownPlugin
from biasim.simulator.common.errors import Problem
from biasim.simulator.common.yamlsource import FieldPath, SourceMap
from biasim.simulator.study import registered_prompts
from biasim.simulator.study.analysis_spec import AnalysisSpec
from biasim.simulator.study.columns import RESERVED as RESERVED_COLUMNS
from biasim.simulator.study.config import (
    RESULT_COLUMNS,
    ModelVariant,
    OutputField,
    RoleConfig,
    StageConfig,
    Study,
    StudyConfig,
    SyntheticField,
    analysis_name,
)
from biasim.simulator.study.counterfactual_checks import check_counterfactual
from biasim.simulator.study.decisions_spec import StageDecisionsSpec
from biasim.simulator.study.facts import StudyFacts
from biasim.simulator.study.hints import nearest, synthetic_hint, undefined_message
from biasim.simulator.study.pairing import draw_trial, pool
from biasim.simulator.study.pairing_checks import check_pairing
from biasim.simulator.study.personas import ABLATION_FACTOR
from biasim.simulator.study.populations import REDACTED
from biasim.simulator.study.stage_graph import stage_population
from biasim.simulator.study.templating import (
    RENDER_ERRORS,
    compile_expression,
    compile_template,
    parse_template,
    render,
)


def check_study(
    config: StudyConfig,
    smap: SourceMap,
    *,
    check_backends: bool,
    on_render: RenderHook | None = None,
) -> list[Problem]:
    """Check what the schema alone cannot: references between sections, and every template
    (each rendered text handed to ``on_render``)."""
    problems: list[Problem] = []
    known_backends = BACKENDS.names()
    if check_backends:
        problems += _unknown_backend_problems(config, smap, known_backends)
        problems += _backend_option_problems(config, smap)
    problems += _credential_urls(config, smap)
    problems += _synthetic_key_problems(config, smap)
    problems += _reserved_name_problems(config, smap)
    problems += _model_label_problems(config, smap, check_backends, known_backends)
    problems += _persona_problems(config, smap)
    stage_problems, stage_fields = _stage_problems(config, smap)
    problems += stage_problems

    for i, stage in enumerate(config.stages):
        if stage.pairing is not None:
            problems.extend(check_pairing(config, stage, ("stages", i), smap))
        if stage.counterfactual is not None:
            problems.extend(check_counterfactual(config, stage, ("stages", i), smap))

    problems += _analysis_problems(config, smap)

    from biasim.simulator.study.batch_checks import check_batch_roles
    from biasim.simulator.study.logprob_checks import check_logprob_stages
    from biasim.simulator.study.pipeline_checks import check_pipeline

    problems.extend(check_logprob_stages(config, smap))
    problems.extend(check_batch_roles(config, smap))

    # Every design count builds the personas: a description that cannot render stops here.
    described = _description_problem(config, smap)
    if described is not None:
        return [*problems, described]
    pipeline_problems = check_pipeline(config, smap)
    problems.extend(pipeline_problems)
    if not pipeline_problems:
        too_large = _design_too_large(config, smap)
        problems.extend(
            [too_large] if too_large else _check_templates(config, smap, stage_fields, on_render)
        )
        if not problems:
            problems.extend(_when_failures(config, smap))
    return problems


def _when_failures(config: StudyConfig, smap: SourceMap) -> list[Problem]:
    """A `when` on design values that fails for some agent of the design (the template check
    renders one factor level at a time, so it need not meet that agent; the run would)."""
    from biasim.simulator.study.design import when_counts

    failures = when_counts(config).failures
    return [
        smap.problem(("stages", i, "when"), f"cannot be evaluated: {failures[stage.name]}")
        for i, stage in enumerate(config.stages)
        if stage.name in failures
    ]


def _unknown_backend_problems(
    config: StudyConfig, smap: SourceMap, known_backends: list[str]
) -> list[Problem]:
    """Roles whose backend is not registered, or needs an extra that is not installed."""
    problems: list[Problem] = []
    add = problems.append
    for name, role in config.roles.items():
        if role.backend not in known_backends:
            add(
                smap.problem(("roles", name, "backend"), str(UnknownPlugin(BACKENDS, role.backend)))
            )
        elif why := BACKENDS.missing_extra(role.backend):
            add(smap.problem(("roles", name, "backend"), why))
    return problems


def _backend_option_problems(config: StudyConfig, smap: SourceMap) -> list[Problem]:
    """Options a backend's declaration refuses (an http tool's header holding a value instead
    of a variable name, a python backend's module that does not import): found when the
    study is checked, not when the run builds its backends."""
    from biasim.simulator.llm.allowlist import declarations

    return [
        smap.problem((*item.path, *(item.error.field or "backend").split(".")), str(item.error))
        for item in declarations(config)
        if item.error is not None
    ]


def _synthetic_key_problems(config: StudyConfig, smap: SourceMap) -> list[Problem]:
    """Synthetic truth tables keyed by values no persona has."""
    problems: list[Problem] = []
    add = problems.append
    for name, role in config.roles.items():
        for at, tables, _ in _synthetic_tables(name, role):
            for fname, spec in tables.items():
                for problem in _synthetic_keys(config, spec, (*at, fname), smap):
                    add(problem)
    return problems


def _reserved_name_problems(config: StudyConfig, smap: SourceMap) -> list[Problem]:
    """Axes, vars and factors named like results columns or each other; recorded vars that no
    factor level defines."""
    axes = config.personas.axes
    problems: list[Problem] = []
    add = problems.append
    clashes = (set(axes) | set(config.vars)) & RESERVED_COLUMNS
    for clash in sorted(clashes):
        add(
            smap.problem(
                ("personas", "axes", clash) if clash in axes else ("vars", clash),
                f"`{clash}` is a reserved name",
            )
        )
    for var in sorted(set(axes) & set(config.vars)):
        add(smap.problem(("vars", var), f"`{var}` is also a persona axis"))
    factors = config.design.factors
    for fname in factors:
        if fname in RESERVED_COLUMNS or fname in axes or fname in config.vars:
            add(smap.problem(("design", "factors", fname), f"`{fname}` is a reserved name"))
    for fname, levels in factors.items():
        if not levels:
            add(smap.problem(("design", "factors", fname), "a factor needs at least one level"))
        for level, fvars in levels.items():
            for var in sorted(set(fvars) & (set(axes) | RESERVED_COLUMNS | set(factors))):
                add(
                    smap.problem(
                        ("design", "factors", fname, level, var), f"`{var}` is a reserved name"
                    )
                )
    factor_vars = {v for levels in factors.values() for fv in levels.values() for v in fv}
    for i, var in enumerate(config.design.record):
        if var not in factor_vars:
            add(smap.problem(("design", "record", i), f"no factor level defines `{var}`"))
    return problems


def _model_label_problems(
    config: StudyConfig, smap: SourceMap, check_backends: bool, known_backends: list[str]
) -> list[Problem]:
    """Roles listing models: unique labels, the same labels in every role, known backends."""
    problems: list[Problem] = []
    add = problems.append
    labels: tuple[str, ...] | None = None
    for name, role in config.roles.items():
        if not role.models:
            continue
        mine = tuple(role.variants())
        if len(set(mine)) != len(role.models):
            add(smap.problem(("roles", name, "models"), "two models have the same label"))
        if labels is None:
            labels = mine
        elif set(mine) != set(labels):
            add(
                smap.problem(
                    ("roles", name, "models"),
                    f"roles listing models must list the same labels; another role has "
                    f"{list(labels)}",
                )
            )
        if check_backends:
            for j, variant in enumerate(role.variants().values()):
                if variant.backend not in known_backends:
                    where = ("roles", name, "models", j, "backend")
                    add(smap.problem(where, str(UnknownPlugin(BACKENDS, variant.backend))))
    return problems


def _persona_problems(config: StudyConfig, smap: SourceMap) -> list[Problem]:
    """The ablation factor's name taken, and a name bank without names for a persona or too few."""
    factors = config.design.factors
    problems: list[Problem] = []
    add = problems.append
    ablation = config.personas.ablation
    if ablation and list(factors.get(ABLATION_FACTOR, {})) != ablation:
        add(
            smap.problem(
                ("design", "factors", ABLATION_FACTOR),
                f"`{ABLATION_FACTOR}` is the factor `personas.ablation` adds; name yours otherwise",
            )
        )
    if config.personas.source == "name_bank":
        for key in _persona_keys(config):
            if not config.personas.names.get(key):
                where = "name_bank" if config.personas.name_bank else "names"
                add(smap.problem(("personas", where), f"no names for `{key}`"))
        problem = _names_run_out(config, smap)
        if problem is not None:
            add(problem)
    return problems


def _stage_problems(
    config: StudyConfig, smap: SourceMap
) -> tuple[list[Problem], dict[str, dict[str, OutputField]]]:
    """Each stage's role, name, output fields and completion; with each stage's output fields."""
    axes, factors = config.personas.axes, config.design.factors
    problems: list[Problem] = []
    add = problems.append
    from biasim.simulator.study.casting import cast

    players = cast(config)
    stage_names: list[str] = []
    stage_fields: dict[str, dict[str, OutputField]] = {}
    for i, stage in enumerate(config.stages):
        if stage.role not in config.roles:
            add(smap.problem(("stages", i, "role"), f"no role named `{stage.role}`"))
        if stage.name in stage_names:
            add(smap.problem(("stages", i, "name"), f"stage `{stage.name}` is declared twice"))
        for fname in stage.output or {}:
            # Output fields become results columns: only result column names clash.
            if fname in RESULT_COLUMNS or fname in axes or fname in factors:
                add(smap.problem(("stages", i, "output", fname), f"`{fname}` is a reserved name"))
        for j, shared in enumerate(stage.shared_across):
            if shared not in factors and shared != "model_label":
                add(
                    smap.problem(
                        ("stages", i, "shared_across", j), f"`{shared}` is not a design factor"
                    )
                )
        problems += _completion_problems(config, i, stage, players, smap)
        stage_names.append(stage.name)
        stage_fields[stage.name] = dict(stage.output or {})
        problems += _synthetic_choice_problems(config, stage, smap)
    return problems, stage_fields


def _completion_problems(
    config: StudyConfig, i: int, stage: StageConfig, players: dict[str, Any], smap: SourceMap
) -> list[Problem]:
    """A stage whose role has completion models needs a formatter that can return the structure."""
    problems: list[Problem] = []
    add = problems.append
    completion_models = any(not v.structured_output for v in players.get(stage.role, {}).values())
    if completion_models and stage.completion is None:
        add(
            smap.problem(
                ("stages", i, "role"),
                f"role `{stage.role}` has completion models (structured_output: false): "
                "the stage needs a `completion` section with a formatter",
            )
        )
    if completion_models and not stage.output:
        add(smap.problem(("stages", i, "output"), "a formatter needs output fields to extract"))
    if not stage.forced_choice and not any(
        f.type == "choice" for f in (stage.output or {}).values()
    ):
        add(
            smap.problem(("stages", i, "forced_choice"), "the stage has no `choice` field to relax")
        )
    if stage.completion is not None and stage.completion.formatter not in config.roles:
        add(
            smap.problem(
                ("stages", i, "completion", "formatter"),
                f"no role named `{stage.completion.formatter}`",
            )
        )
    elif stage.completion is not None:
        formatter = stage.completion.formatter
        unable = [k for k, v in players[formatter].items() if not v.structured_output]
        if unable:
            per_model = any(unable)  # labels: each model would format its own answers
            add(
                smap.problem(
                    ("stages", i, "completion", "formatter"),
                    f"role `{formatter}` would be played by completion models "
                    f"({', '.join(unable)}), which cannot return the structure; give it "
                    "`shared: true` so its own model formats every model's answers"
                    if per_model
                    else f"role `{formatter}` is a completion model (structured_output: "
                    "false) and cannot return the structure",
                )
            )
    return problems


def _synthetic_choice_problems(
    config: StudyConfig, stage: StageConfig, smap: SourceMap
) -> list[Problem]:
    """Synthetic answers of a stage's role that are not choices of the stage's output field."""
    problems: list[Problem] = []
    add = problems.append
    role = config.roles.get(stage.role)
    for at, declared, _ in _synthetic_tables(stage.role, role) if role else []:
        for fname, spec in declared.items():
            field_spec = (stage.output or {}).get(fname)
            if field_spec is None or not field_spec.choices:
                continue
            tables = [*spec.probabilities.values(), *([spec.default] if spec.default else [])]
            for table in tables:
                extra = set(table) - set(field_spec.choices)
                if extra:
                    add(
                        smap.problem(
                            (*at, fname),
                            f"{sorted(extra)} are not choices of `{fname}`"
                            + synthetic_hint(smap.field(at[:-1])),
                        )
                    )
    return problems


def _analysis_problems(config: StudyConfig, smap: SourceMap) -> list[Problem]:
    """Each analysis checked by its kind, and two analyses writing tables of the same name."""
    problems: list[Problem] = []
    add = problems.append
    names: dict[str, int] = {}
    for i, analysis in enumerate(config.analyses):
        facts = StudyFacts(config, smap, ("analyses", i))
        kind = KINDS.instance(analysis.kind)
        kind.check(analysis, facts)
        problems.extend(facts.problems)
        if not kind.reads_counterfactual_sets(analysis):
            problems.extend(_twins_refused(config, smap, facts, analysis.kind))
        name = analysis_name(analysis, i)
        if name in names and not _share_outputs(config.analyses[names[name]], analysis):
            add(
                smap.problem(
                    ("analyses", i, "name"),
                    f"analyses[{names[name]}] already writes tables named `{name}`",
                )
            )
        names.setdefault(name, i)
    return problems


def _twins_refused(
    config: StudyConfig, smap: SourceMap, facts: StudyFacts, kind: str
) -> list[Problem]:
    """A stage of counterfactual sets named by a kind that counts each row as its own unit:
    it would count an agent's twins as independent people (an anti-conservative p)."""
    sets = {stage.name for stage in config.stages if stage.counterfactual is not None}
    return [
        smap.problem(
            (*facts.at, *path),
            f"stage `{stage}` runs as counterfactual sets (`counterfactual:`), and `{kind}` "
            "counts each row as its own unit, so an agent's twins would count as independent "
            "people: analyse the sets with `counterfactual_text` (letters: `pair: cf_set`), "
            "or analyse a study whose stage has no `counterfactual`",
        )
        for stage, path in dict.fromkeys(facts.stages_read)
        if stage in sets
    ]


def _share_outputs(first: AnalysisSpec, other: AnalysisSpec) -> bool:
    """Whether two analyses may share a name: kinds over one stage's decisions write outputs
    of different suffixes, so their names may coincide (the seed-004 analysis keeps one set of
    output names across its kinds); two of one kind would overwrite each other's."""
    return (
        isinstance(first, StageDecisionsSpec)
        and isinstance(other, StageDecisionsSpec)
        and first.kind != other.kind
    )


def _description_problem(config: StudyConfig, smap: SourceMap) -> Problem | None:
    """Why the persona description does not render, with the variables it could use."""
    from biasim.personas import build_personas

    described: dict[str, Any] = {}

    def describe(source: str, context: dict[str, Any]) -> str:
        described.clear()
        described.update(context)  # what the description could use, should it fail
        return render(source, context)

    path = ("personas", "description")
    try:
        build_personas(config.personas, 1, describe)
    except TemplateSyntaxError as exc:
        file, line = smap.text_line(path, exc.lineno)
        return Problem(file, line, smap.field(path), f"template syntax error: {exc.message}")
    except (UndefinedError, SecurityError, TypeError) as exc:
        return _render_problem(smap, path, exc, config.personas.description, described)
    return None


def _design_too_large(config: StudyConfig, smap: SourceMap) -> Problem | None:
    """More agents than the design-size limit, counted without building any."""
    from biasim.simulator.study.design import (
        MAX_AGENTS_ENV,
        design_size,
        max_agents,
        population_sizes,
    )

    limit = max_agents()
    total = sum(population_sizes(config).values()) if config.populations else design_size(config)
    if total <= limit:
        return None
    return smap.problem(
        ("design", "agents_per_value"),
        f"the design has {total:,} agents, more than the limit of {limit:,}; set "
        f"{MAX_AGENTS_ENV} to allow more",
    )


def _names_run_out(config: StudyConfig, smap: SourceMap) -> Problem | None:
    """More agents per persona than a group has names (``--agents`` or the file): names would
    repeat, which a name-swap design must declare (``repeat_names``), never do silently."""
    personas = config.personas
    per = config.design.agents_per_value
    sizes = [(len(personas.names.get(k, [])), k) for k in _persona_keys(config)]
    fewest, key = min(sizes, key=lambda size: size[0], default=(0, ""))
    if personas.repeat_names or not 0 < fewest < per:
        return None
    bank = f"name bank `{personas.name_bank}`" if personas.name_bank else "`personas.names`"
    return smap.problem(
        ("design", "agents_per_value"),
        f"{per} agents per persona value, but {bank} has {fewest} names for `{key}`: names "
        f"would repeat; use at most {fewest}, or set `personas.repeat_names: true`",
    )


def _synthetic_keys(
    config: StudyConfig, spec: SyntheticField, at: FieldPath, smap: SourceMap
) -> list[Problem]:
    """Problems with what a synthetic table is keyed on: each `by` name must be a persona
    axis, a design factor or `model_label`, and each key's values must exist where the
    values are listed in the study (persona axes, inline factor levels)."""
    axes = config.personas.axes
    factors = config.design.factors
    by = [spec.by] if isinstance(spec.by, str) else list(spec.by or [])
    problems = []
    known: list[list[str] | None] = []
    for j, name in enumerate(by):
        if name in axes:
            known.append(list(axes[name]))
        elif name in factors:
            levels = factors[name]
            known.append(list(levels) if isinstance(levels, dict) else None)
        elif name in ("model_label", "item"):
            known.append(None)
        else:
            where = (*at, "by", j) if isinstance(spec.by, list) else (*at, "by")
            problems.append(
                smap.problem(
                    where,
                    f"`{name}` is not a persona axis, a design factor, `model_label` or `item` "
                    "(a pairing stage's items)"
                    + nearest(name, [*axes, *factors, "model_label", "item"])
                    + synthetic_hint(smap.field(at[:-2])),
                )
            )
            return problems
    for key in [*spec.probabilities, *spec.weights, *spec.mean]:
        for name, values, value in zip(by, known, key.split("|"), strict=False):
            if values is not None and value not in values:
                problems.append(
                    smap.problem(
                        (*at, "probabilities", key),
                        f"`{value}` is not a value of `{name}`"
                        + nearest(value, values)
                        + synthetic_hint(smap.field(at[:-2])),
                    )
                )
    return problems


def _credential_urls(config: StudyConfig, smap: SourceMap) -> list[Problem]:
    """Server URLs with credentials in them (``https://user:pass@host``), anywhere in a role's
    options: the HTTP client refuses them together with the key header, so every call would
    fail, and a password in a study file ends up in every copy of it."""
    problems = []
    for name, role in config.roles.items():
        for j, variant in enumerate(role.variants().values()):
            at = ("roles", name, "models", j) if role.models else ("roles", name)
            for path in _user_info_paths(variant.options, (*at, "options")):
                problems.append(
                    smap.problem(
                        path,
                        "a server URL may not carry credentials (`user:password@`): the HTTP "
                        "client cannot send them with the API key, and the study file would "
                        "hold a secret; put the key in an environment variable and name it "
                        "with `api_key_env`",
                    )
                )
    return problems


def _user_info_paths(value: Any, at: FieldPath) -> list[FieldPath]:
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in _user_info_paths(v, (*at, k))]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in _user_info_paths(v, (*at, i))]
    # A URL, or Ollama's `host`, which may be written without a scheme.
    if isinstance(value, str) and "@" in value and ("://" in value or at[-1] == "host"):
        try:
            parts = urlsplit(value if "://" in value else f"//{value}")
        except ValueError:
            return []
        if parts.username or parts.password:
            return [at]
    return []


def _synthetic_tables(
    name: str, role: RoleConfig
) -> list[tuple[FieldPath, dict[str, SyntheticField], str]]:
    """Where a role declares synthetic answers: ``(path, tables, backend)`` for the role and
    for each model variant that declares its own."""
    found = [(("roles", name, "synthetic"), dict(role.synthetic), role.backend)]
    for j, entry in enumerate(role.models or []):
        if isinstance(entry, ModelVariant) and entry.synthetic is not None:
            at = ("roles", name, "models", j, "synthetic")
            found.append((at, dict(entry.synthetic), entry.backend or role.backend))
    return found


def _persona_keys(config: StudyConfig) -> list[str]:
    from biasim.personas import persona_keys

    return persona_keys(config.personas.axes, cross=config.personas.cross)


#: ``on_render(field_path, text, agent)``: a template rendered for one agent of the dry render.
RenderHook = Callable[[FieldPath, str, Any], None]


def dry_render(study: Study, on_render: RenderHook) -> None:
    """Render every template as validation does, handing each rendered text to ``on_render``
    (``biasim validate --show-prompts``)."""
    stage_fields = {stage.name: dict(stage.output or {}) for stage in study.config.stages}
    _check_templates(study.config, study.source_map, stage_fields, on_render)


def _check_templates(
    config: StudyConfig,
    smap: SourceMap,
    stage_fields: dict[str, dict[str, OutputField]],
    on_render: RenderHook | None = None,
) -> list[Problem]:
    """Render every template for one persona of each axis value under every factor level
    (one factor varied at a time), following each stage's ``when``."""
    from biasim.personas import build_personas

    problems = _template_syntax_problems(config, smap)
    if problems:
        return problems
    personas = build_personas(config.personas, 1, render)  # _description_problem passed
    from biasim.simulator.study.design import AgentSpec, model_labels, pool_sizes

    seen: set[tuple[FieldPath, str]] = set()
    over_limit: set[FieldPath] = set()

    def report(
        path: FieldPath,
        exc: Exception,
        source: str | None = None,
        context: dict[str, Any] | None = None,
    ) -> None:
        problem = _render_problem(smap, path, exc, source, context)
        if (path, problem.message) not in seen:
            seen.add((path, problem.message))
            problems.append(problem)

    factors = config.design.factors
    variations = _factor_variations(factors)
    label = model_labels(config)[0]
    readers = _reader_specs(config)
    sizes = pool_sizes(config) if config.populations else {}
    # A market's applicants render once as referred (their referrer a persona) and once not.
    referred_variants = (False, True) if config.market is not None else (False,)
    for branch, chosen, persona, referred in itertools.product(
        _answer_branches(config), variations, personas, referred_variants
    ):
        levels = tuple(chosen.items())
        variables = tuple(item for f, lv in levels for item in factors[f][lv].items())
        spec = AgentSpec("", "check", levels, variables, label, persona, 0, 0, "")
        outputs: dict[str, dict[str, Any]] = {}
        own: dict[str, tuple[AgentSpec, dict[str, dict[str, Any]]]] = {}
        # A branch changes one stage's answer: the stages up to it render as without it.
        branched = _stage_index(config, branch[0]) if branch is not None else -1
        for i, stage in enumerate(config.stages):
            ctx = _stage_context(config, stage, spec, (outputs, own, readers), referred)
            if stage.when is not None and not _when_holds(smap, stage, i, ctx, (seen, problems)):
                continue
            if stage.pairing is not None:
                ctx = {**ctx, **draw_trial(stage.pairing, ctx, 0).context()}
                if i > branched and not pool(stage.pairing, ctx):
                    report(("stages", i, "pairing"), ValueError("no items for this level"))
            if i > branched:
                # A reading stage renders once per number of documents its evaluations show.
                for shown in _shown_contexts(stage, ctx, spec.persona, sizes.get(stage.name)):
                    _check_stage_templates(stage, i, shown, spec, (report, over_limit, on_render))
            answer = _placeholder_answer(stage_fields[stage.name], stage.name, branch, ctx)
            if stage.name in readers:
                own[stage_population(config, stage)][1][stage.name] = answer
            else:
                outputs[stage.name] = answer
            if stage.advance is not None:
                try:
                    compile_expression(stage.advance)(answer)
                except RENDER_ERRORS as exc:
                    message = _render_problem(smap, ("stages", i, "advance"), exc).message
                    report(("stages", i, "advance"), ValueError(message))
    return problems


def _stage_index(config: StudyConfig, name: str) -> int:
    return next(i for i, stage in enumerate(config.stages) if stage.name == name)


def _check_stage_templates(
    stage: StageConfig,
    i: int,
    ctx: dict[str, Any],
    spec: Any,
    hooks: tuple[Callable[..., None], set[FieldPath], RenderHook | None],
) -> None:
    """One stage's dynamic choices and templates rendered for one checked agent."""
    report, over_limit, on_render = hooks
    for fname, fspec in (stage.output or {}).items():
        if fspec.choices_from and not str(ctx.get(fspec.choices_from) or "").strip():
            report(
                ("stages", i, "output", fname, "choices_from"),
                ValueError(f"no template variable `{fspec.choices_from}` here"),
            )
    _render_parts(_stage_parts(stage, i, ctx), spec, report, over_limit, on_render)


def _template_syntax_problems(config: StudyConfig, smap: SourceMap) -> list[Problem]:
    """Templates and ``when`` expressions that do not compile (nothing renders until they do)."""
    problems: list[Problem] = []
    templates: list[tuple[FieldPath, str]] = [
        (("personas", "description"), config.personas.description)
    ]
    for i, stage in enumerate(config.stages):
        for part in ("system", "prompt"):
            if getattr(stage, part) is not None:
                templates.append((("stages", i, part), getattr(stage, part)))
        if stage.completion is not None:
            templates.append((("stages", i, "completion", "prompt"), stage.completion.prompt))
            templates.append((("stages", i, "completion", "extract"), stage.completion.extract))
    for path, source in templates:
        try:
            compile_template(source)
        except TemplateSyntaxError as exc:
            file, line = smap.text_line(path, exc.lineno)
            problems.append(
                Problem(file, line, smap.field(path), f"template syntax error: {exc.message}")
            )
            continue
        for lineno, why in registered_prompts.call_problems(parse_template(source)):
            file, line = smap.text_line(path, lineno)
            problems.append(Problem(file, line, smap.field(path), why))
    for i, stage in enumerate(config.stages):
        if stage.when is not None:
            try:
                compile_expression(stage.when)
            except TemplateSyntaxError as exc:
                problems.append(
                    smap.problem(("stages", i, "when"), f"expression syntax error: {exc.message}")
                )
    return problems


def _factor_variations(factors: dict[str, Any]) -> list[dict[str, Any]]:
    """Every factor at its first level, then one factor at a time at each other level."""
    first = {f: next(iter(levels)) for f, levels in factors.items() if levels}
    return [dict(first)] + [
        {**first, f: level} for f, levels in factors.items() for level in list(levels)[1:]
    ]


def _answer_branches(config: StudyConfig) -> list[tuple[str, str, int] | None]:
    """Every answer a later template can branch on: the first choice of every field, then each
    other choice of one field at a time (a template that breaks only after "Stay" is found
    before any call, not after half a run)."""
    branches: list[tuple[str, str, int] | None] = [None]
    for stage in config.stages:
        for fname, fspec in (stage.output or {}).items():
            count = _choice_count(config, fspec)
            branches += [(stage.name, fname, k) for k in range(1, count)]
    return branches


def _stage_context(
    config: StudyConfig,
    stage: StageConfig,
    spec: Any,
    state: tuple[dict, dict, dict[str, Any]],
    referred: bool = False,
) -> dict[str, Any]:
    """What a stage's templates see for the checked agent: in a study with populations, a
    reading stage sees its own population's first agent and answers; in a market, the
    applicants' stages see their history and ``referrer`` (the checked persona when
    ``referred``, else none)."""
    from biasim.simulator.study.design import template_context
    from biasim.simulator.study.market import History, applicant_context

    outputs, own, readers = state
    ctx = template_context(config, spec, outputs)
    if config.populations:
        # Each population's agents see their own persona and earlier answers;
        # readers also see the documents of one evaluation.
        reader, answers = (
            own.setdefault(stage_population(config, stage), (readers[stage.name], {}))
            if stage.name in readers
            else (spec, outputs)
        )
        ctx = template_context(config, reader, answers)
        if stage.reads is not None:
            ctx = {**dict(spec.variables), **dict(spec.levels), **ctx}
        market = config.market
        source = market.applicants.population if market is not None else None
        if stage.reads is None and stage_population(config, stage) == source:
            history = History((1,), 1) if referred else History()
            ctx = {**ctx, **applicant_context(history, spec.persona if referred else None)}
    return ctx


def _shown_contexts(
    stage: StageConfig, ctx: dict[str, Any], persona: Any, sizes: tuple[int, ...] | None
) -> list[dict[str, Any]]:
    """The contexts a stage's templates render in: its own, or for a reading stage one per
    number of documents shown (``sizes`` as the design cuts its pools; a guess from ``size``
    and ``select`` where the design forms no evaluation)."""
    if stage.reads is None:
        return [ctx]
    reads = stage.reads
    guess = {"single": 1, "pair": 2}.get(reads.matching) or reads.size or (stage.select or 1) + 1
    return [{**ctx, **_reading_placeholders(stage, persona, size)} for size in sizes or (guess,)]


def _when_holds(
    smap: SourceMap,
    stage: StageConfig,
    i: int,
    ctx: dict[str, Any],
    found: tuple[set[tuple[FieldPath, str]], list[Problem]],
) -> bool:
    """Whether the stage runs for this context; an expression that fails is reported once."""
    seen, problems = found
    assert stage.when is not None
    try:
        return bool(compile_expression(stage.when)(ctx))
    except RENDER_ERRORS as exc:
        # The expression is one line: locate the field, not a template line.
        at = ("stages", i, "when")
        message = _render_problem(smap, at, exc, stage.when, ctx).message
        if (("stages", i, "when"), message) not in seen:
            seen.add((("stages", i, "when"), message))
            problems.append(smap.problem(("stages", i, "when"), message))
        return False


def _stage_parts(
    stage: StageConfig, i: int, ctx: dict[str, Any]
) -> list[tuple[FieldPath, str | None, dict[str, Any]]]:
    """The stage's templates, each with the context it renders with."""
    parts: list[tuple[FieldPath, str | None, dict[str, Any]]] = [
        (("stages", i, "system"), stage.system, ctx),
        (("stages", i, "prompt"), stage.prompt, ctx),
    ]
    if stage.completion is not None:
        parts += [
            (("stages", i, "completion", "prompt"), stage.completion.prompt, ctx),
            (
                ("stages", i, "completion", "extract"),
                stage.completion.extract,
                {**ctx, "text": written_placeholder("text", stage.name)},
            ),
        ]
    return parts


def _render_parts(
    parts: list[tuple[FieldPath, str | None, dict[str, Any]]],
    spec: Any,
    report: Callable[..., None],
    over_limit: set[FieldPath],
    on_render: RenderHook | None,
) -> None:
    """Render each part, reporting what fails; a part over a sandbox limit is not tried again."""
    for path, source, context in parts:
        if source is None or path in over_limit:
            continue
        try:
            text = compile_template(source).render(context)
        except RENDER_ERRORS as exc:
            report(path, exc, source, context)
            if isinstance(exc, SecurityError):
                # A sandbox limit is the template's, not this context's: rendering
                # it again for every persona and branch would only repeat the cost.
                over_limit.add(path)
        else:
            if on_render is not None:
                on_render(path, text, spec)


def _placeholder_answer(
    fields: dict[str, OutputField],
    stage_name: str,
    branch: tuple[str, str, int] | None,
    ctx: dict[str, Any],
) -> dict[str, Any]:
    """A stand-in answer of the stage: the branch's choice for its field, else the first; a
    text the model writes is a placeholder that says which stage writes it."""
    answer = {
        f: _placeholder(spec_, ctx, branch[2] if branch[:2] == (stage_name, f) else 0)
        if branch is not None
        else _placeholder(spec_, ctx)
        for f, spec_ in fields.items()
    }
    written = [f for f, spec_ in fields.items() if spec_.type == "string"] if answer else ["text"]
    return {**answer, **{f: written_placeholder(f, stage_name) for f in written}}


def written_placeholder(field: str, stage: str) -> str:
    """What the prompts shown hold where the run puts a text a model wrote: ``field`` of the
    answer of ``stage``."""
    return f"[{field} written in stage `{stage}` at run time]"


def _reader_specs(config: StudyConfig) -> dict[str, Any]:
    """Stage -> the first agent of its population, for stages whose population has personas
    of its own (or none): their templates see that agent, not an applicant."""
    from biasim.simulator.study.design import population_specs

    if not config.populations:
        return {}
    first = {
        name: population_specs(config, name)[0]
        for name, pop in config.populations.items()
        if pop.personas != "study"
    }
    return {
        stage.name: first[stage_population(config, stage)]
        for stage in config.stages
        if stage_population(config, stage) in first
    }


def document_stand_in(i: int, stage: str, redacted: bool) -> str:
    """What the prompts shown hold where the run puts the ``i``-th document a reading shows
    (its text, written in ``stage``)."""
    return f"[document {i}, written in stage `{stage}` at run time" + (
        f"; its author's name replaced by {REDACTED}]" if redacted else "]"
    )


#: Finds each :func:`document_stand_in` in a rendered prompt (``estimate`` puts the document
#: the run sends in its place).
DOCUMENT_STAND_IN = re.compile(
    r"\[document \d+, written in stage `[^`]*` at run time"
    rf"(?:; its author's name replaced by {re.escape(REDACTED)})?\]"
)


def _reading_placeholders(stage: StageConfig, persona: Any, size: int) -> dict[str, Any]:
    """What a reading's templates see (see ``agents.Reading``) with ``size`` documents, with
    labelled stand-ins for what only the run knows: distinct documents, each under its own
    placeholder name, and the name withheld where the stage redacts it, as the run sends it."""
    reads = stage.reads
    assert reads is not None
    redacted = reads.author == "redacted"
    documents = []
    for i in range(size):
        name = REDACTED if redacted else f"[name of applicant {i + 1}]"
        if reads.counterfactual:
            name = f"[a name of the other {reads.counterfactual}]"
        documents.append(
            {
                "label": i + 1,
                "name": name,
                "text": document_stand_in(i + 1, reads.stage, redacted),
                "attributes": {} if redacted else dict(persona.attributes),
                "variant": "",
            }
        )
    return {
        "documents": documents,
        "document": documents[0],
        "select": stage.select or (1 if reads.matching == "pair" else 0),
        "pool_size": size,
    }


def _choice_count(config: StudyConfig, spec: OutputField) -> int:
    """How many answers a field can give that a template could tell apart (its branches)."""
    if spec.type == "boolean":
        return 2
    if spec.type != "choice":
        return 1
    if spec.choices:
        return len(spec.choices)
    sources = [
        config.vars,
        *(lv for levels in config.design.factors.values() for lv in levels.values()),
    ]
    counts = [
        len([c for c in str(source[spec.choices_from]).split("|") if c.strip()])
        for source in sources
        if spec.choices_from in source
    ]
    return max(counts, default=1)


def _placeholder(spec: OutputField, context: dict[str, Any] | None = None, k: int = 0) -> Any:
    """A stand-in answer for the dry render: the ``k``-th choice (or ``False`` for k = 1 of a
    boolean), else a value of the field's type."""
    if spec.type == "choice":
        choices = spec.choices
        if choices is None and spec.choices_from and context is not None:
            raw = str(context.get(spec.choices_from) or "")
            choices = [c.strip() for c in raw.split("|") if c.strip()]
        choices = choices or ["choice"]
        return choices[min(k, len(choices) - 1)]
    if spec.type == "boolean":
        return k == 0
    return {"string": "text", "integer": 0, "number": 0.0}[spec.type]


def _render_problem(
    smap: SourceMap,
    path: FieldPath,
    exc: Exception,
    source: str | None = None,
    context: dict[str, Any] | None = None,
) -> Problem:
    """The failed render as a located problem; an undefined name lists what ``context`` (the
    variables at that place) offers and the nearest one."""
    lineno = _template_lineno(exc)
    file, line = smap.text_line(path, lineno) if lineno else smap.locate(path)
    message = str(exc)
    if isinstance(exc, UndefinedError):
        message = undefined_message(message, source, context)
    elif isinstance(exc, SecurityError):
        message = f"template does something the sandbox forbids: {message}"
    return Problem(file, line, smap.field(path), message)


def _template_lineno(exc: Exception) -> int | None:
    tb = exc.__traceback__
    lineno = None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == "<template>":
            lineno = tb.tb_lineno
        tb = tb.tb_next
    return lineno
