"""OpenAI and OpenAI-compatible servers (vLLM, llama.cpp, LM Studio, ...) via the official SDK.

The SDK's own retries are switched off (``max_retries=0``): :mod:`simulator.llm.retry` is the one
retry layer, so every failure is translated here into the normalised errors it understands.

The translation helpers (:func:`retry_after_seconds`, :func:`error_for_status`,
:func:`map_openai_error`, :func:`map_body_error`, :func:`resolve_api_key`) are shared by the
Ollama and LangChain backends so that one HTTP status means the same thing for every provider.
They never import the ``openai`` package themselves: an exception can only be an ``openai`` error
if the SDK is already loaded, and a study that only talks to Ollama should not pay for importing
it.
"""

from __future__ import annotations

import email.utils
import importlib
import ipaddress
import json
import math
import os
import sys
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import orjson

from .errors import (
    BackendConfigError,
    BackendError,
    FatalBackendError,
    OverloadedError,
    TransientError,
)
from .types import LLMRequest, LLMResponse, completion_prompt, extra_sampling

#: Backstop socket timeout for SDK clients. The retry layer's per-attempt ``asyncio.timeout``
#: is what actually bounds a call; this only makes sure an orphaned socket cannot linger forever.
SDK_TIMEOUT_S = 900.0
#: Placeholder key for local servers that ignore authentication (the SDK insists on some key).
LOCAL_API_KEY = "not-needed"
DEFAULT_API_KEY_ENV = "OPENAI_API_KEY"

_OPTIONS = {"base_url", "api_key_env", "structured"}
_STRUCTURED_MODES = ("auto", "json_schema", "json_object_schema", "json_object", "none")
# 408/409/425 are worth another attempt (the OpenAI SDK retries 408 and 409 itself by default).
_RETRYABLE_CLIENT_STATUSES = frozenset({408, 409, 425})
_OVERLOAD_STATUSES = frozenset({429, 503})
_LOCAL_SUFFIXES = (".localhost", ".local", ".internal", ".lan", ".home.arpa")
_MAX_MESSAGE_CHARS = 500


# --------------------------------------------------------------------------------------------
# Shared helpers
# --------------------------------------------------------------------------------------------


def retry_after_seconds(headers: Mapping[str, str] | None) -> float | None:
    """Seconds a server asked the client to wait, from its response headers.

    Understands ``retry-after-ms`` (OpenAI's millisecond extension) and ``Retry-After`` as
    delta-seconds (fractions accepted) or an HTTP-date.

    Args:
        headers: Response headers (any mapping; names are matched case-insensitively).

    Returns:
        Non-negative seconds, or ``None`` when the server did not say (or said nonsense).
    """
    if not headers:
        return None
    lowered = {str(k).lower(): str(v).strip() for k, v in headers.items()}
    millis = lowered.get("retry-after-ms")
    if millis:
        try:
            value = float(millis) / 1000.0
        except ValueError:
            value = math.nan
        if math.isfinite(value):
            return max(0.0, value)
    raw = lowered.get("retry-after")
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(raw)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:  # RFC 9110 dates are GMT even when the zone is missing
            when = when.replace(tzinfo=UTC)
        return max(0.0, (when - datetime.now(UTC)).total_seconds())
    return max(0.0, value) if math.isfinite(value) else None


def error_for_status(
    status: int,
    message: str,
    headers: Mapping[str, str] | None = None,
) -> BackendError:
    """The normalised error for an HTTP error status.

    Args:
        status: HTTP status; anything below 100 means an error without a status (e.g. one
            reported in the middle of a streamed answer).
        message: Human-readable reason (already free of secrets).
        headers: Response headers, for ``Retry-After``.

    Returns:
        :class:`OverloadedError` for 429/503, :class:`TransientError` for other 5xx,
        408/409/425 and status-less errors, :class:`FatalBackendError` for other 4xx.
    """
    retry_after = retry_after_seconds(headers)
    if status in _OVERLOAD_STATUSES:
        return OverloadedError(message, retry_after=retry_after)
    if status < 100 or status >= 500 or status in _RETRYABLE_CLIENT_STATUSES:
        return TransientError(message, retry_after=retry_after)
    return FatalBackendError(message)


def map_body_error(exc: BaseException) -> BackendError | None:
    """Translate a malformed response body (not JSON, wrong shape, bad encoding).

    SDKs let these escape raw (``json.JSONDecodeError`` from ``response.json()``, pydantic
    errors from response models), yet they are what a proxy hiccup or a half-written body
    looks like, so another attempt is worthwhile.

    Args:
        exc: Anything raised while calling an SDK.

    Returns:
        A :class:`TransientError`, or ``None`` when ``exc`` is not a body problem.
    """
    if isinstance(exc, json.JSONDecodeError):
        return TransientError(
            f"malformed response body: not JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"
        )
    if isinstance(exc, UnicodeDecodeError):
        return TransientError(f"malformed response body: not valid {exc.encoding}")
    pydantic = sys.modules.get("pydantic")
    if pydantic is not None and isinstance(exc, pydantic.ValidationError):
        return TransientError(
            f"malformed response body: {exc.error_count()} field(s) do not match the "
            f"{exc.title} response model"
        )
    return None


def map_openai_error(exc: BaseException, secret: str | None = None) -> BackendError | None:
    """Translate an ``openai`` SDK exception (also LangChain's subclasses of them).

    Args:
        exc: The exception.
        secret: API key to scrub from the message, should a server echo it back.

    Returns:
        The normalised error, or ``None`` when ``exc`` is not an ``openai`` exception.
    """
    openai = sys.modules.get("openai")
    if openai is None or not isinstance(exc, openai.OpenAIError):
        return None
    if isinstance(exc, openai.APIStatusError):
        message = clip_message(f"{type(exc).__name__} (HTTP {exc.status_code}): {exc.message}")
        return error_for_status(exc.status_code, redact(message, secret), exc.response.headers)
    if isinstance(exc, openai.APITimeoutError):
        return TransientError("request timed out in the OpenAI SDK")
    if isinstance(exc, openai.APIConnectionError):
        cause = exc.__cause__ or exc.__context__
        detail = f"{type(cause).__name__}: {cause}" if cause is not None else exc.message
        return TransientError(redact(clip_message(f"connection error: {detail}"), secret))
    if isinstance(exc, openai.APIResponseValidationError):
        return TransientError(f"malformed response body: {exc.message}")
    # Content-filter stops, client-side misuse, missing credentials: another try cannot help.
    return FatalBackendError(redact(clip_message(f"{type(exc).__name__}: {exc}"), secret))


def redact(text: str, secret: str | None) -> str:
    """Replace every occurrence of ``secret`` in ``text`` (no-op for empty or placeholder keys).

    Args:
        text: Message that may quote a server's answer.
        secret: The key in use.

    Returns:
        ``text`` with the key masked.
    """
    if secret and secret != LOCAL_API_KEY and secret in text:
        return text.replace(secret, "***")
    return text


def is_local_url(url: str | None) -> bool:
    """Whether ``url`` points at a server on this machine or a private network.

    Such servers (Ollama, vLLM, llama.cpp, a docker service name) normally ignore API keys.

    Args:
        url: Base URL, or ``None`` for the SDK's hosted default.

    Returns:
        True for localhost, loopback/private/link-local addresses, single-label host names and
        ``.local``-style suffixes.
    """
    if not url:
        return False
    host = (urlsplit(url if "://" in url else f"http://{url}").hostname or "").lower()
    if not host:
        return False
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        # A single-label name (``vllm``, ``ollama``) is a docker or LAN service name.
        return host == "localhost" or host.endswith(_LOCAL_SUFFIXES) or "." not in host
    return address.is_loopback or address.is_private or address.is_link_local


def resolve_api_key(env_name: str, base_url: str | None) -> str:
    """Read the API key from the environment variable the study names.

    Args:
        env_name: Name of the variable (never the key itself).
        base_url: Where the key will be sent; ``None`` means the hosted default endpoint.

    Returns:
        The key, or :data:`LOCAL_API_KEY` for a local server when the variable is unset.

    Raises:
        BackendConfigError: The variable is unset and the endpoint is not local.
    """
    key = os.environ.get(env_name)
    if key:
        return key
    if is_local_url(base_url):
        return LOCAL_API_KEY
    where = base_url or "the hosted OpenAI API"
    raise BackendConfigError(
        f"environment variable {env_name} is not set; export the API key for {where} there "
        "(or name another variable with options.api_key_env)",
        field="options.api_key_env",
    )


def public_url(url: str | None) -> str | None:
    """``url`` without user-info, query and fragment, safe for manifests and cache keys.

    Args:
        url: A base URL.

    Returns:
        The URL with credentials stripped, or ``None``.
    """
    if not url:
        return None
    parts = urlsplit(url)
    netloc = parts.hostname or ""
    if ":" in netloc:  # an IPv6 literal loses its brackets in .hostname
        netloc = f"[{netloc}]"
    if parts.port is not None:
        netloc = f"{netloc}:{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))


def option_str(options: Mapping[str, Any], name: str, default: str | None = None) -> str | None:
    """A string option, checked.

    Args:
        options: The role's options.
        name: Option name.
        default: Value when absent.

    Returns:
        The value, or ``default``.

    Raises:
        BackendConfigError: The option is present but not a non-empty string.
    """
    value = options.get(name, default)
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise BackendConfigError(f"`{name}` must be a non-empty string", field=f"options.{name}")
    return value.strip()


def check_options(options: Mapping[str, Any], allowed: set[str], backend: str) -> None:
    """Reject options a backend does not know (a typo should not silently do nothing).

    Args:
        options: The role's options.
        allowed: Names the backend understands.
        backend: Backend name, for the message.

    Raises:
        BackendConfigError: Unknown option names.
    """
    unknown = set(options) - allowed
    if unknown:
        raise BackendConfigError(
            f"unknown option(s) {sorted(unknown)}; the {backend} backend takes {sorted(allowed)}",
            field="options",
        )


def structured_mode(options: Mapping[str, Any], modes: tuple[str, ...], default: str) -> str:
    """The ``structured`` option, checked against ``modes``.

    Args:
        options: The role's options.
        modes: Accepted values.
        default: Value when absent.

    Returns:
        The mode.

    Raises:
        BackendConfigError: Not one of ``modes``.
    """
    mode = options.get("structured", default)
    if mode not in modes:
        raise BackendConfigError(
            f"`structured` must be one of {list(modes)}, not {mode!r}",
            field="options.structured",
        )
    return str(mode)


def clip_message(text: str) -> str:
    """Collapse whitespace and cap length: error pages can be whole HTML documents, and the
    reason recorded with a failed call needs the gist only.

    Args:
        text: Any message.

    Returns:
        At most 500 characters on one line.
    """
    text = " ".join(str(text).split())
    return text if len(text) <= _MAX_MESSAGE_CHARS else text[: _MAX_MESSAGE_CHARS - 3] + "..."


# --------------------------------------------------------------------------------------------
# The backend
# --------------------------------------------------------------------------------------------


class OpenAIBackend:
    """Chat completions (``/chat/completions``), or plain completions (``/completions``) for a
    role with ``endpoint: completions``, through ``openai.AsyncOpenAI``.

    Options:
        base_url: Server URL (default: ``OPENAI_BASE_URL`` or the SDK's hosted endpoint).
        api_key_env: Environment variable holding the key (default ``OPENAI_API_KEY``). When it
            is unset a local server gets a placeholder key; the hosted API is a config error.
        structured: How a JSON Schema is enforced: ``json_schema`` (strict structured outputs,
            default), ``json_object`` (JSON mode; the prompt describes the fields) or ``none``.
    """

    name = "openai"
    synthetic = False
    endpoints = ("chat", "completions")
    sampling_extras = frozenset({"frequency_penalty", "presence_penalty", "stop"})
    default_concurrency = 16

    def __init__(self, role: Any) -> None:
        options = dict(role.options)
        check_options(options, _OPTIONS, self.name)
        if not role.model:
            raise BackendConfigError(
                "the openai backend needs a model id, e.g. `model: gpt-4o-mini`", field="model"
            )
        self.model = str(role.model)
        self.structured = structured_mode(options, _STRUCTURED_MODES, "auto")
        # `auto` asks for a JSON-schema response_format until the server rejects it once.
        self._schema_format_rejected = False
        base_url = option_str(options, "base_url") or os.environ.get("OPENAI_BASE_URL") or None
        self._key_env = option_str(options, "api_key_env", DEFAULT_API_KEY_ENV) or ""
        api_key = resolve_api_key(self._key_env, base_url)

        import openai

        self._client = openai.AsyncOpenAI(
            base_url=base_url,
            api_key=api_key,
            max_retries=0,  # the retry layer is the only one that retries
            timeout=SDK_TIMEOUT_S,
            # aiohttp's connection pool: httpcore's scans every connection for every request,
            # which capped a 64-way study near 70 % of what the server could give.
            http_client=openai.DefaultAioHttpClient(timeout=SDK_TIMEOUT_S),
        )
        self.base_url = public_url(str(self._client.base_url))
        # `cast_to` must be the Response class of the HTTP library this SDK release is built on:
        # httpx up to 2.x, httpx2 from 3.x.
        sdk_http = importlib.import_module("openai._base_client")
        self._response_type = (getattr(sdk_http, "httpx2", None) or sdk_http.httpx).Response

    def identity(self) -> dict[str, Any]:
        """Backend, model, server and structured mode (never the key)."""
        return {
            "backend": self.name,
            "model": self.model,
            "base_url": self.base_url,
            "structured": self.structured,
        }

    async def generate(self, request: LLMRequest) -> LLMResponse:
        """One chat completion, or one plain completion for ``endpoint: completions``.

        Raises:
            BackendError: Normalised failure (see :func:`map_openai_error`).
        """
        kwargs: dict[str, Any] = {
            "model": self.model,
            "temperature": request.temperature,
            "top_p": request.top_p,
            "seed": request.seed,
            **extra_sampling(request),
        }
        if request.max_tokens is not None:  # no cap: the server's own limit
            kwargs["max_tokens"] = request.max_tokens
        if request.endpoint == "completions":
            # A base model writes no enforced JSON: a schema is checked by the engine only.
            kwargs["prompt"] = completion_prompt(request.messages)
            return _answer(await self._post("/completions", kwargs), "text")
        kwargs["messages"] = list(request.messages)
        kwargs["response_format"] = self._response_format(request.json_schema)
        if kwargs["response_format"] is None:
            del kwargs["response_format"]
        try:
            raw = await self._post("/chat/completions", kwargs)
        except BackendError as exc:
            if not self._schema_format_unsupported(kwargs, exc):
                raise
            # JSON mode plus our own validation, for every later call too.
            self._schema_format_rejected = True
            kwargs["response_format"] = {"type": "json_object"}
            raw = await self._post("/chat/completions", kwargs)
        return _answer(raw, "message")

    def _response_format(self, schema: dict[str, Any] | None) -> dict[str, Any] | None:
        mode = self.structured
        if schema is None or mode == "none":
            return None
        if mode == "auto":
            mode = "json_object" if self._schema_format_rejected else "json_schema"
        if mode == "json_schema":
            return {
                "type": "json_schema",
                "json_schema": {"name": "answer", "schema": schema, "strict": True},
            }
        if mode == "json_object_schema":  # llama.cpp's server: JSON mode constrained by a schema
            return {"type": "json_object", "schema": schema}
        return {"type": "json_object"}

    def _schema_format_unsupported(self, kwargs: dict[str, Any], exc: BackendError) -> bool:
        """Whether ``exc`` is a server refusing the JSON-schema response_format itself."""
        if self.structured != "auto" or self._schema_format_rejected:
            return False
        if kwargs.get("response_format", {}).get("type") != "json_schema":
            return False
        text = str(exc)
        # Servers without the feature answer 400 or 422, or 500 from a request validator
        # (llama.cpp's server), naming the field they refused.
        refused = "response_format" in text or "json_schema" in text
        return refused and any(f"HTTP {code}" in text for code in (400, 422, 500))

    async def _post(self, path: str, body: dict[str, Any]) -> Any:
        try:
            # The SDK's documented raw-request path: its client, auth, timeouts and error
            # classes, without re-walking every parameter through TypedDict transforms and
            # building pydantic models (about 1.3 ms of CPU a call, the bottleneck at high
            # concurrency). The body is already in the wire format.
            return await self._client.post(path, body=body, cast_to=self._response_type)
        except Exception as exc:
            mapped = map_openai_error(exc, self._secret()) or map_body_error(exc)
            if mapped is None:
                raise
            raise mapped from exc

    def _secret(self) -> str | None:
        # Read at error time rather than kept on the instance, so no attribute holds the key.
        return os.environ.get(self._key_env)

    async def aclose(self) -> None:
        """Close the HTTP connection pool."""
        await self._client.close()


def _answer(raw: Any, kind: str) -> LLMResponse:
    """The first choice of a raw chat (``kind`` ``message``) or plain (``text``) completion."""
    try:
        completion = orjson.loads(raw.content)
        choice = completion["choices"][0]
        content = choice["message"].get("content") if kind == "message" else choice["text"]
        usage = completion.get("usage") or {}
    except (orjson.JSONDecodeError, KeyError, IndexError, TypeError, AttributeError) as exc:
        what = "chat completion" if kind == "message" else "completion"
        raise TransientError(f"malformed response body: no {what} choice") from exc
    return LLMResponse(
        text=content or "",
        prompt_tokens=int(usage.get("prompt_tokens") or 0),
        completion_tokens=int(usage.get("completion_tokens") or 0),
        truncated=choice.get("finish_reason") == "length",
    )
