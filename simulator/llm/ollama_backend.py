"""Ollama via its official Python client (``ollama.AsyncClient``).

Ollama's client neither retries nor times out by default. The retry layer's per-attempt
``asyncio.timeout`` bounds each call; an httpx timeout is passed as well only so that a socket
abandoned by a cancelled call cannot linger.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import httpx

from biasim.simulator.llm.egress import Egress, Host
from biasim.simulator.llm.errors import BackendConfigError, BackendError, TransientError
from biasim.simulator.llm.http_common import (
    SDK_TIMEOUT_S,
    check_options,
    clip_message,
    error_for_status,
    map_body_error,
    option_str,
    public_url,
    redact,
    structured_mode,
)
from biasim.simulator.llm.netguard import httpx_hooks
from biasim.simulator.llm.types import LLMRequest, LLMResponse, extra_sampling

DEFAULT_HOST = "http://127.0.0.1:11434"
#: The ollama client sends this variable's value as a bearer token when it is set.
OLLAMA_KEY_ENV = "OLLAMA_API_KEY"
_OPTIONS = {"host", "structured"}
_STRUCTURED_MODES = ("json_schema", "json_object", "none")
_CONNECT_TIMEOUT_S = 30.0


def map_ollama_error(exc: BaseException, secret: str | None = None) -> BackendError | None:
    """Translate an exception from the ``ollama`` client or its httpx transport.

    ``ollama.ResponseError`` carries only the status, but the client raises it while handling
    httpx's ``HTTPStatusError``, which stays reachable as ``__context__`` and still holds the
    response headers, so ``Retry-After`` is honoured for Ollama too.

    Args:
        exc: The exception.
        secret: Key to scrub from the message, should a server echo it back.

    Returns:
        The normalised error, or ``None`` when ``exc`` is none of these.
    """
    ollama = sys.modules.get("ollama")
    if ollama is not None and isinstance(exc, ollama.ResponseError):
        status = int(exc.status_code)
        response = getattr(exc.__context__, "response", None)
        headers = getattr(response, "headers", None)
        where = f"HTTP {status}" if status >= 100 else "error in the answer stream"
        message = redact(clip_message(f"ollama {where}: {exc.error}"), secret)
        return error_for_status(status, message, headers)
    if isinstance(exc, httpx.HTTPStatusError):
        status = exc.response.status_code
        message = redact(clip_message(f"HTTP {status}: {exc.response.text}"), secret)
        return error_for_status(status, message, exc.response.headers)
    if isinstance(exc, httpx.TimeoutException):
        return TransientError(f"request timed out in the HTTP client ({type(exc).__name__})")
    if isinstance(exc, httpx.RequestError):
        # Resets, refused connections and bodies cut short (RemoteProtocolError) all land here.
        detail = clip_message(f"connection error: {type(exc).__name__}: {exc}")
        return TransientError(redact(detail, secret))
    if isinstance(exc, ConnectionError):
        # The ollama client turns httpx.ConnectError into a builtin ConnectionError.
        return TransientError(clip_message(f"connection error: {exc}"))
    return None


class OllamaBackend:
    """Chat through an Ollama server's ``/api/chat``.

    Options:
        host: Server URL (default: ``OLLAMA_HOST`` or ``http://127.0.0.1:11434``).
        structured: ``json_schema`` (send the schema as ``format``, default), ``json_object``
            (``format: "json"``) or ``none``.
    """

    name = "ollama"
    synthetic = False
    default_concurrency = 4
    sampling_extras = frozenset({"frequency_penalty", "presence_penalty", "stop"})

    def __init__(self, role: Any) -> None:
        options = dict(role.options)
        check_options(options, _OPTIONS, self.name)
        if not role.model:
            raise BackendConfigError(
                "the ollama backend needs a model name, e.g. `model: llama3.2`", field="model"
            )
        self.model = str(role.model)
        self.structured = structured_mode(options, _STRUCTURED_MODES, "json_schema")
        host = option_str(options, "host") or os.environ.get("OLLAMA_HOST") or DEFAULT_HOST
        if "://" not in host:  # OLLAMA_HOST is often written as `0.0.0.0:11434`
            host = f"http://{host}"
        self.host = public_url(host)

        import ollama

        self._client = ollama.AsyncClient(
            host=host,
            timeout=httpx.Timeout(SDK_TIMEOUT_S, connect=_CONNECT_TIMEOUT_S),
            # The client follows redirects: each hop is checked (see netguard).
            event_hooks=httpx_hooks(),
        )

    @classmethod
    def egress(cls, role: Any) -> Egress:
        """Its server (the study's ``host``, else ``OLLAMA_HOST``, else this machine) and the
        variable the ollama client sends as a bearer token."""
        host = option_str(dict(role.options), "host")
        url = host or os.environ.get("OLLAMA_HOST") or DEFAULT_HOST
        return Egress((Host(url, "options.host" if host else None),), (OLLAMA_KEY_ENV,))

    def identity(self) -> dict[str, Any]:
        """Backend, model, server and structured mode."""
        return {
            "backend": self.name,
            "model": self.model,
            "host": self.host,
            "structured": self.structured,
        }

    async def generate(self, request: LLMRequest) -> LLMResponse:
        """One non-streaming chat call.

        Raises:
            BackendError: Normalised failure (see :func:`map_ollama_error`).
        """
        fmt: dict[str, Any] | str | None = None
        if request.json_schema is not None and self.structured == "json_schema":
            fmt = request.json_schema
        elif request.json_schema is not None and self.structured == "json_object":
            fmt = "json"
        try:
            response = await self._client.chat(
                model=self.model,
                messages=list(request.messages),
                format=fmt,
                options={
                    "seed": request.seed,
                    "temperature": request.temperature,
                    "top_p": request.top_p,
                    **({"num_predict": request.max_tokens} if request.max_tokens else {}),
                    **extra_sampling(request),
                },
                stream=False,
            )
        except Exception as exc:
            # The client sends OLLAMA_API_KEY (if set) as a bearer token; never echo it.
            secret = os.environ.get(OLLAMA_KEY_ENV)
            mapped = map_ollama_error(exc, secret) or map_body_error(exc)
            if mapped is None:
                raise
            raise mapped from exc
        message = getattr(response, "message", None)
        if message is None:
            raise TransientError("malformed response body: no `message` in the Ollama answer")
        return LLMResponse(
            text=message.content or "",
            prompt_tokens=int(getattr(response, "prompt_eval_count", 0) or 0),
            completion_tokens=int(getattr(response, "eval_count", 0) or 0),
            truncated=getattr(response, "done_reason", None) == "length",
        )

    async def aclose(self) -> None:
        """Close the HTTP connection pool."""
        await self._client.close()
