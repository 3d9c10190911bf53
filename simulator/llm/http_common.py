"""What the HTTP backends (openai, ollama, langchain) share: error translation, keys, URLs and
option checks, so that one HTTP status means the same thing for every provider.

Nothing here imports the ``openai`` package: an exception can only be an ``openai`` error if the
SDK is already loaded, and a study that only talks to Ollama should not pay for importing it.
"""

from __future__ import annotations

import email.utils
import ipaddress
import json
import math
import os
import sys
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from biasim.simulator.llm.errors import (
    BackendConfigError,
    BackendError,
    FatalBackendError,
    OverloadedError,
    TransientError,
)

#: Backstop socket timeout for HTTP clients. The retry layer's per-attempt ``asyncio.timeout``
#: is what actually bounds a call; this only makes sure an orphaned socket cannot linger forever.
SDK_TIMEOUT_S = 900.0
#: Placeholder key for local servers that ignore authentication (the SDK insists on some key).
LOCAL_API_KEY = "not-needed"
DEFAULT_API_KEY_ENV = "OPENAI_API_KEY"

# 408/409/425 are worth another attempt (the OpenAI SDK retries 408 and 409 itself by default).
_RETRYABLE_CLIENT_STATUSES = frozenset({408, 409, 425})
_OVERLOAD_STATUSES = frozenset({429, 503})
_LOCAL_SUFFIXES = (".localhost", ".local", ".internal", ".lan", ".home.arpa")
_MAX_MESSAGE_CHARS = 500


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
    if isinstance(exc, openai.APIConnectionError):  # APITimeoutError included
        cause = socket_error(exc)
        if cause is not None:
            # The SDK's aiohttp shim reports a refused or reset connection as a timeout.
            return connection_error(cause, secret)
        if isinstance(exc, openai.APITimeoutError):
            return TransientError("request timed out in the OpenAI SDK")
        return connection_error(exc.__cause__ or exc.__context__ or exc, secret)
    if isinstance(exc, openai.APIResponseValidationError):
        return TransientError(f"malformed response body: {exc.message}")
    # Content-filter stops, client-side misuse, missing credentials: another try cannot help.
    return FatalBackendError(redact(clip_message(f"{type(exc).__name__}: {exc}"), secret))


def socket_error(exc: BaseException) -> OSError | None:
    """The operating system's error under ``exc`` (refused, reset, unreachable ...), if any.

    Follows ``__cause__``/``__context__``: HTTP clients wrap it, sometimes more than once.

    Args:
        exc: Anything raised by an HTTP client.

    Returns:
        The first error in the chain carrying an ``errno`` (timeouts excluded), or ``None``.
    """
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and not isinstance(current, TimeoutError) and current.errno:
            return current
        current = current.__cause__ or current.__context__
    return None


def connection_error(exc: BaseException, secret: str | None = None) -> TransientError:
    """A retryable error for a failed connection that names what the socket reported.

    Args:
        exc: The HTTP client's exception (or the operating system's error itself).
        secret: API key to scrub from the message.

    Returns:
        ``connection error: <reason>; <exception>``, e.g. ``Connection refused; ...``.
    """
    detail = f"{type(exc).__name__}: {exc}"
    cause = socket_error(exc)
    if cause is not None:
        detail = f"{os.strerror(cause.errno)}; {detail}"
    return TransientError(redact(clip_message(f"connection error: {detail}"), secret))


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
