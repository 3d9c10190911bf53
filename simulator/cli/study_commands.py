"""Commands about a study and its run: ``run``, ``init``, ``validate``, ``schema``, ``list``
and ``kinds``."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.table import Table

from biasim.simulator.cli.common import (
    BIOGRAPHIES_OPTION,
    COST_LIMIT_OPTION,
    MASKED_LM_OPTION,
    POSTINGS_OPTION,
    PRICES_OPTION,
    app,
    err_console,
    fail_input,
    out_console,
    print_written,
    say_failed_analyses,
    styled,
)
from biasim.simulator.common.errors import InputError
from biasim.simulator.common.tables import print_table
from biasim.simulator.engine.failures import DEFAULT_MAX_ERROR_RATE, EXIT_BROKEN
from biasim.simulator.engine.progress import DEFAULT_LOG_EVERY_S, progress_display

# The options of `biasim run` that only it has, one constant each so its signature reads as the
# option list.
_STUDY_ARGUMENT = typer.Argument(help="Study file or built-in study name.")
_OUT_OPTION = typer.Option(help="Run directory (default runs/NAME-TIME).")
_BACKEND_OPTION = typer.Option(help="Backend for every role.")
_MODEL_OPTION = typer.Option(help="Model id for every role.")
_AGENTS_OPTION = typer.Option(help="Agents per persona value.")
_MAX_CONCURRENCY_OPTION = typer.Option(help="Calls in flight per backend.")
_SEED_OPTION = typer.Option(help="Study seed.")
_RESUME_OPTION = typer.Option(help="Continue the run in this directory.")
_REPLAY_OPTION = typer.Option(
    help="Answer from this earlier run's calls.sqlite first (exact replay)."
)
_MAX_ERROR_RATE_OPTION = typer.Option(
    min=0.0,
    max=1.0,
    help="The run fails (exit 3, status failed, resumable) when more than this share of "
    "the units it asked fail; 1 never.",
)
_PROGRESS_EVERY_OPTION = typer.Option(
    min=0.1,
    envvar="BIASIM_PROGRESS_EVERY",
    help="Seconds between progress lines when output is not a terminal (a log file).",
)
_ALLOW_ENDPOINT_OPTION = typer.Option(
    help="HOST or HOST:PORT the study may send requests and keys to, when it names a "
    "server or key variable other than the backend's default (repeatable)."
)
_TRUST_BACKEND_OPTION = typer.Option(
    help="Backend NAME (a plug-in, or langchain:PROVIDER) to run although it does not "
    "declare the hosts it contacts and the variables it sends; the hosts it reaches still "
    "need --allow-endpoint (repeatable)."
)
_BATCH_OPTION = typer.Option(
    "--batch",
    help="Send every role's calls through its provider's batch API (openai, "
    "anthropic): about half the price, answers within hours; a stopped run resumes "
    "the same batches (see docs/guides/batch.md).",
)
_REASK_LOST_OPTION = typer.Option(
    help="With --resume: ask again the answers the call store lost or had altered "
    "(without it, such a resume stops and says how many calls would be paid twice)."
)


@app.command()
def run(
    study: Annotated[str | None, _STUDY_ARGUMENT] = None,
    out: Annotated[Path | None, _OUT_OPTION] = None,
    backend: Annotated[str | None, _BACKEND_OPTION] = None,
    model: Annotated[str | None, _MODEL_OPTION] = None,
    agents: Annotated[int | None, _AGENTS_OPTION] = None,
    max_concurrency: Annotated[int | None, _MAX_CONCURRENCY_OPTION] = None,
    seed: Annotated[int | None, _SEED_OPTION] = None,
    resume: Annotated[Path | None, _RESUME_OPTION] = None,
    replay: Annotated[Path | None, _REPLAY_OPTION] = None,
    max_error_rate: Annotated[float, _MAX_ERROR_RATE_OPTION] = DEFAULT_MAX_ERROR_RATE,
    progress_every: Annotated[float, _PROGRESS_EVERY_OPTION] = DEFAULT_LOG_EVERY_S,
    masked_lm: Annotated[str | None, MASKED_LM_OPTION] = None,
    postings: Annotated[Path | None, POSTINGS_OPTION] = None,
    biographies: Annotated[Path | None, BIOGRAPHIES_OPTION] = None,
    allow_endpoint: Annotated[list[str] | None, _ALLOW_ENDPOINT_OPTION] = None,
    trust_backend: Annotated[list[str] | None, _TRUST_BACKEND_OPTION] = None,
    cost_limit: Annotated[float | None, COST_LIMIT_OPTION] = None,
    batch: Annotated[bool, _BATCH_OPTION] = False,
    prices: Annotated[Path | None, PRICES_OPTION] = None,
    reask_lost: Annotated[bool, _REASK_LOST_OPTION] = False,
) -> None:
    """Run a study and print its decision-rate report.

    Exit codes: 0 complete; 1 something broke after the run directory was written, or the
    analysis failed (the answers are kept); 2 bad input (study, option, output directory, or a
    corrupt run directory to resume), nothing written or changed; 3 the calls failed: every call
    of a stage failed, or more than --max-error-rate of the units did (status `failed`; fix the
    cause and continue with --resume); 4 stopped at the cost limit (resumable with a higher
    --cost-limit); 130 or 143 stopped by Ctrl-C or SIGTERM (resumable).
    """
    from biasim.simulator.engine.runner import RunOptions, prepare

    options = RunOptions(
        study=study,
        out=out,
        backend=backend,
        model=model,
        agents=agents,
        max_concurrency=max_concurrency,
        seed=seed,
        resume=resume,
        replay=replay,
        max_error_rate=max_error_rate,
        masked_lm=masked_lm,
        postings=postings,
        biographies=biographies,
        allow_endpoints=tuple(allow_endpoint or ()),
        trust_backends=tuple(trust_backend or ()),
        cost_limit=cost_limit,
        batch=batch,
        prices=prices,
        reask_lost=reask_lost,
    )
    try:
        prepared = prepare(options)
    except InputError as exc:
        fail_input(exc)
    bios = prepared.study.config.biographies
    if bios is not None and bios.excluded:
        # Said before the calls, so rows left out of the biography file are never silent.
        _print_biographies(prepared.study.config, err_console)
    outcome = _execute_with_progress(prepared, progress_every)
    if outcome.status == "interrupted":
        _exit_interrupted(outcome)
    _report_outcome(outcome)


def _execute_with_progress(prepared: Any, progress_every: float) -> Any:
    """Run the prepared study under a progress display; exit 130 on Ctrl-C before the run's
    own handler is in place, 2 on bad input."""
    from biasim.simulator.engine.runner import RunStartFailed, execute

    try:
        with progress_display(err_console, progress_every) as progress:
            # Rich prints above a live bar on the same console.
            outcome = execute(
                prepared,
                progress,
                notify=lambda message: err_console.print(message, markup=False, highlight=False),
            )
    except KeyboardInterrupt:
        # Only before the run's own handler is in place (the lock, the first manifest).
        err_console.print("interrupted before the run started")
        raise typer.Exit(130) from None
    except InputError as exc:
        fail_input(exc)
    except RunStartFailed as exc:
        err_console.print(
            styled("run failed before its first call", "red", f": {exc}\n")
            + f"nothing was asked; {prepared.out}/manifest.json records the failure (status "
            f"`failed`, with its traceback); fix the cause, then: biasim run --resume "
            f"{prepared.out}",
            markup=False,
            highlight=False,
        )
        raise typer.Exit(EXIT_BROKEN) from None
    return outcome


def _exit_interrupted(outcome: Any) -> NoReturn:
    """Say what an interrupted (or cost-limited) run saved and how to continue, then exit."""
    from biasim.simulator.engine.budget import COST_LIMIT_EXIT

    print_written(outcome.out, outcome.summary)
    summary = outcome.summary
    at_limit = outcome.exit_code == COST_LIMIT_EXIT
    # The count progress ended on (units settled), then how many of them hold an answer.
    done, rows = summary.get("units_done", 0), summary.get("units", 0)
    causes = summary.get("skip_causes", "skipped")
    skipped = f"; {done - rows} need no call: {causes}" if done > rows else ""
    err_console.print(
        f"run {'stopped' if at_limit else 'interrupted'}: {outcome.message}; {done} of "
        f"{summary['units_expected']} units done ({rows} with results{skipped}); every answer "
        "is saved in "
        f"{outcome.out}\ncontinue with: biasim run --resume {outcome.out}"
        + (" --cost-limit USD" if at_limit else ""),
        markup=False,
    )
    raise typer.Exit(outcome.exit_code)


def _report_outcome(outcome: Any) -> None:
    """The report, accounting and errors of a finished run; exit 1 when its analysis failed,
    the run's exit code when it did not complete."""
    from biasim.simulator.report.outputs import print_report

    if outcome.summary.get("units"):
        print_report(outcome.summary, out_console)
    say_failed_analyses(
        outcome.summary,
        f"every answer is saved in {outcome.out}; redo the analysis with: "
        f"biasim analyze run {outcome.out}",
    )
    _print_accounting(outcome.summary)
    _print_errors(outcome.results)
    calls = outcome.summary["calls"]
    # A resume counts what it replays in units, as progress and the stop message do.
    cached = outcome.summary.get("units_from_cache", 0)
    out_console.print(
        f"run directory: {outcome.out}  (new calls: {calls['new']}, "
        f"from cache: {calls['from_cache']} calls, {cached} units)",
        soft_wrap=True,
        highlight=False,
    )
    print_written(outcome.out, outcome.summary)
    if outcome.status == "complete" and outcome.exit_code:
        raise typer.Exit(outcome.exit_code)  # an analysis failed
    if outcome.status != "complete":
        how = (
            f"fix the cause, then continue with: biasim run --resume {outcome.out}"
            if "resume" in outcome.summary
            else "resuming would end here again: change the study and run it afresh"
        )
        err_console.print(
            styled(f"run {outcome.status}", "red", f": {outcome.message}\n")
            + f"everything answered is saved; {how}",
            highlight=False,
        )
        raise typer.Exit(outcome.exit_code or EXIT_BROKEN)


def _print_errors(results: Any) -> None:
    """The commonest reason units failed: a refused or silent server is named, not only
    counted."""
    if "status" not in results or "error" not in results:
        return
    reasons = results.loc[results["status"] == "error", "error"].value_counts()
    if len(reasons):
        err_console.print(
            styled("failed units", "red", f": {int(reasons.sum())}; commonest reason ")
            + f"({int(reasons.iloc[0])}): {reasons.index[0]}",
            highlight=False,
            soft_wrap=True,
        )


def _print_accounting(summary: dict) -> None:
    rows = summary.get("accounting", {}).get("by_role", [])
    for row in rows:
        calls = row["calls"] or 0
        out_console.print(
            styled(row["role"], "bold", "")
            + f" {row['backend']}:{row['model']}: {_units_and_answers(row)}"
            + (f", {row['redone']} redone after an error" if row.get("redone") else "")
            + f"), {calls} calls, {row.get('invalid_first') or 0} invalid first answers, "
            f"{row['reasks'] or 0} re-asks, tokens {row['prompt_tokens'] or 0} in / "
            f"{row['completion_tokens'] or 0} out, {(row['latency_s'] or 0) / max(calls, 1):.2f} "
            f"s/call, {row['attempts'] or 0} attempts, cost "
            + ("unknown" if row.get("cost_usd") is None else f"${row['cost_usd']:.4f}")
            + (
                styled(f", {row['truncated']} cut at max_tokens", "yellow", "")
                if row.get("truncated")
                else ""
            ),
            highlight=False,
        )


def _units_and_answers(row: dict[str, Any]) -> str:
    """``120 units, 240 answers (240 answered, ...``: a role's units of work, and its answers
    by final state where a unit holds several (an agent's call and its counterfactual twins')."""
    states = [row.get(k) or 0 for k in ("answered", "invalid", "error")]
    units = row.get("units") or 0
    answers = "" if sum(states) == units else f", {sum(states)} answers"
    return f"{units} units{answers} ({states[0]} answered, {states[1]} invalid, {states[2]} error"


@app.command()
def init(
    name: Annotated[str, typer.Argument(help="Study name (letters, digits and _).")],
    out: Annotated[Path | None, typer.Option(help="File to write (default NAME.yaml).")] = None,
    template: Annotated[
        str,
        typer.Option(
            help="decisions (parity of one decision), explicit (agents decide vs the model is "
            "asked), ablation (persona sources), pipeline (apply, screen, pick) or letters "
            "(reference letters' words and style)."
        ),
    ] = "decisions",
    family: Annotated[
        bool,
        typer.Option(
            "--family",
            help="Write a study family instead: a package NAME/ with its own analysis kind, "
            "statistic and command, a study/ folder using it, and the pyproject.toml that "
            "installs it (--out: the folder, default NAME).",
        ),
    ] = False,
) -> None:
    """Write a commented study to start from (it validates and runs as written)."""
    from biasim.simulator.tools.authoring import write_skeleton

    if family:
        _init_family(name, out or Path(name))
        return
    try:
        path = write_skeleton(name, out or Path(f"{name}.yaml"), template)
    except InputError as exc:
        fail_input(exc)
    out_console.print(
        f"wrote {path}\nnext: biasim validate {path} --show-prompts\n"
        f"      biasim run {path} --backend synthetic   (the pipeline on a test double)\n"
        f"      biasim run {path}                       (on the model it names)",
        highlight=False,
        markup=False,
        soft_wrap=True,
    )


def _init_family(name: str, folder: Path) -> None:
    from biasim.simulator.tools.authoring import write_family

    try:
        write_family(name, folder)
    except InputError as exc:
        fail_input(exc)
    out_console.print(
        f"wrote {folder}\nnext: pip install -e {folder}                (installs the family)\n"
        f"      biasim run {folder / 'study'} --backend synthetic\n"
        f"      biasim {name} --help                      (the family's command)",
        highlight=False,
        markup=False,
        soft_wrap=True,
    )


@app.command()
def validate(
    study: Annotated[str, typer.Argument(help="Study file or built-in name.")],
    show_prompts: Annotated[
        bool, typer.Option(help="Print every distinct prompt the study sends, rendered.")
    ] = False,
    masked_lm: Annotated[str | None, MASKED_LM_OPTION] = None,
    postings: Annotated[Path | None, POSTINGS_OPTION] = None,
    biographies: Annotated[Path | None, BIOGRAPHIES_OPTION] = None,
) -> None:
    """Check a study file and render every template once."""
    from biasim.simulator.study.design import design_size, when_counts
    from biasim.simulator.study.options import StudyOptions, load_options_study
    from biasim.simulator.study.persona_writer import ABLATION_SKIP, writes_no_persona

    try:
        loaded = load_options_study(
            StudyOptions(
                study=study, masked_lm=masked_lm, postings=postings, biographies=biographies
            )
        )
    except InputError as exc:
        fail_input(exc)
    for line in loaded.deprecations:
        err_console.print(styled("deprecated", "yellow", f": {line}"), soft_wrap=True)
    if show_prompts:
        _print_prompts(loaded)
    config = loaded.config
    if config.populations:
        from biasim.simulator.study.design import expected_units, population_sizes

        sizes = population_sizes(config)
        out_console.print(
            f"{loaded.path}: ok - {len(config.stages)} stage(s), "
            + ", ".join(f"{n} {name}" for name, n in sizes.items())
            + f", {expected_units(config)} unit(s) if every answer is valid (readings depend "
            "on who advances)" + _limit_note(),
            highlight=False,
        )
        _print_estimate(loaded)
        _print_biographies(config)
        _print_analysis_notes(config, Path(loaded.path).parent)
        _print_endpoint_notes(loaded)
        return
    agents = design_size(config)
    units = agents * len(config.stages)
    # Units count every agent in every stage (as progress and the report do); a `when` on the
    # design is counted here, one that reads earlier answers only in the run.
    counted = when_counts(config).agents
    implicit = {s.name for s in config.stages if writes_no_persona(config, s)}
    skipped = sum(agents - n for name, n in counted.items() if name not in implicit)
    ablation = sum(agents - n for name, n in counted.items() if name in implicit)
    conditional = sum(s.when is not None and s.name not in counted for s in config.stages)
    notes = [f"{skipped} skipped by a `when` on the design"] if skipped else []
    notes += [f"{ablation} skipped: {ABLATION_SKIP}"] if ablation else []
    if conditional:
        notes.append(f"{conditional} stage(s) run only `when` their condition holds")
    bound = f"up to {units}" if conditional else units
    note = f" ({'; '.join(notes)})" if notes else ""
    # Never hard-wrapped: the path must stay copyable, and scripts read the counts.
    out_console.print(
        f"{loaded.path}: ok - {len(config.stages)} stage(s), {agents} agent(s), {bound} unit(s)"
        + note
        + _limit_note(),
        soft_wrap=True,
        highlight=False,
    )
    _print_estimate(loaded)
    _print_casting(config)
    _print_biographies(config)
    _print_analysis_notes(config, Path(loaded.path).parent)
    _print_endpoint_notes(loaded)


def _print_estimate(loaded: Any) -> None:
    """The study's calls, tokens, cost and time in one line (``biasim estimate`` details it)."""
    from biasim.simulator.cli.estimate_commands import totals
    from biasim.simulator.tools.estimate import estimate

    # Loading a model's tokenizer takes seconds; validate's one line need not be exact.
    figures = totals(estimate(loaded, tokenizers=False))
    out_console.print(
        f"estimate: {figures} (tokens approximated; biasim estimate for the model's tokenizer "
        "and the breakdown)",
        highlight=False,
        soft_wrap=True,
    )


def _print_biographies(config: Any, console: Any = out_console) -> None:
    """How the biography file became pairs, and the rows it left out by reason.

    Args:
        config: The validated study.
        console: Where to print (``run`` keeps its standard output for the report).
    """
    bios = config.biographies
    if bios is None:
        return
    pairs = len({r["level"] for r in bios.rows})
    how = "as given (the file is already augmented)" if bios.as_given else "augmented at load"
    left_out = sum(bios.excluded.values())
    console.print(
        f"biographies: {len(bios.rows)} row(s), {pairs} pair(s), {how}"
        + (
            f"; {left_out} row(s) left out: "
            + "; ".join(f"{reason}: {n}" for reason, n in bios.excluded.items())
            if left_out
            else ""
        ),
        soft_wrap=True,
        highlight=False,
    )


def _print_endpoint_notes(loaded: Any) -> None:
    """What `biasim run` will ask the user to confirm (a valid study, but not yet runnable)."""
    from biasim.simulator.llm.allowlist import (
        endpoint_problems,
        user_allowed_hosts,
        user_trusted_backends,
    )

    try:
        allowed, trusted = user_allowed_hosts(), user_trusted_backends()
    except InputError as exc:
        fail_input(exc)
    for problem in endpoint_problems(loaded.config, loaded.source_map, allowed, trusted):
        out_console.print(f"note: {problem}", highlight=False, soft_wrap=True)


def _limit_note() -> str:
    from biasim.simulator.study.design import MAX_AGENTS_ENV, max_agents

    return f"; design limit {max_agents():,} agents ({MAX_AGENTS_ENV} to change)"


def _print_prompts(study: Any) -> None:
    """Each distinct rendered text of each template, headed by where it is and who sends it."""
    from biasim.simulator.study.prompts import distinct_prompts

    prompts = distinct_prompts(study)
    for prompt in prompts:
        others = len(prompt.agents) - 1
        who = prompt.agents[0] + (f"; {others} more agent(s) send it too" if others else "")
        # Plain lines, never cut: the header says exactly who sends the text below it.
        out_console.print(
            f"== {prompt.field} ({who})\n{prompt.text}\n",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
    out_console.print(
        f"{len(prompts)} distinct prompt text(s), rendered for one persona of each axis value "
        "under each factor level (varied one at a time) and, in a reading stage, each number of "
        "documents its pools show at this size; a placeholder such as [text written in stage `x` "
        "at run time] stands for what a model writes",
        highlight=False,
    )


def _print_casting(config: Any) -> None:
    """Which model answers each stage (and formats it) for each model label, when the study
    compares models: the roles feeding the compared ones run per model unless shared."""
    from biasim.simulator.study.casting import castings
    from biasim.simulator.study.design import model_labels

    labels = model_labels(config)
    if len(labels) < 2:
        return
    out_console.print(f"models: {', '.join(labels)}", highlight=False, soft_wrap=True)
    lines: dict[tuple[str, str, bool], list[str]] = {}
    for c in castings(config):
        lines.setdefault((c.stage, c.role, c.formats), []).append(
            f"{c.label} -> {c.model}" if c.label else f"{c.model} for every model"
        )
    for (stage, role, formats), who in lines.items():
        acts = "formatted by" if formats else "by"
        out_console.print(
            f"  {stage} {acts} `{role}`: {', '.join(who)}", highlight=False, soft_wrap=True
        )


def _print_analysis_notes(config: Any, data_dir: Path) -> None:
    """What each analysis says about its inputs (e.g. where its term sets come from)."""
    from biasim.simulator.kinds import get_kind
    from biasim.simulator.study.config import analysis_name

    for i, spec in enumerate(config.analyses):
        for line in get_kind(spec.kind).notes(spec, data_dir):
            # soft_wrap: a long file name is printed whole, never cut into two lines.
            out_console.print(f"{analysis_name(spec, i)}: {line}", highlight=False, soft_wrap=True)


@app.command()
def schema() -> None:
    """Print the JSON Schema of study files."""
    from biasim.registry import KINDS
    from biasim.simulator.study.load import study_json_schema

    sys.stdout.write(json.dumps(study_json_schema(), indent=2) + "\n")
    _warn_broken(KINDS.each()[1])  # the kinds the schema leaves out, and why


def _warn_broken(failures: list[str]) -> None:
    """One warning line for each plug-in that failed to load (the listing shows the rest)."""
    for failure in failures:
        err_console.print(
            styled("warning", "yellow", f" {failure}"), highlight=False, soft_wrap=True
        )


@app.command(name="list")
def list_studies() -> None:
    """List the built-in studies."""
    from biasim.scenarios import builtin_studies

    table = Table(show_header=True)
    table.add_column("study")
    table.add_column("description")
    for name, description in builtin_studies().items():
        table.add_row(name, description)
    print_table(out_console, table)


@app.command()
def kinds() -> None:
    """List the analysis kinds a study's `analyses:` may use (built-in and plug-ins), and
    warn of each plug-in kind that fails to load, naming it, where it is registered and why."""
    from biasim.registry import KINDS, load_families

    load_families()  # the families' own kinds too (a failure is warned of at start)
    found, failures = KINDS.each()
    table = Table(show_header=True)
    for col in ("kind", "what", "fields"):
        table.add_column(col)
    for kind in found:
        fields = ", ".join(f for f in kind.spec.model_fields if f not in ("kind", "name"))
        table.add_row(kind.name, kind.title, fields)
    print_table(out_console, table)
    _warn_broken(failures)
