"""Errors backends raise, normalised so one retry layer can treat every provider alike."""

from __future__ import annotations

import errno


class BackendError(Exception):
    """A call failed.

    Attributes:
        retryable: Whether another attempt may succeed.
        retry_after: Seconds the server asked us to wait (``Retry-After``), if it said.
        overloaded: The server signalled overload (429/503); the concurrency limit shrinks.
    """

    retryable = False
    overloaded = False

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class TransientError(BackendError):
    """A fault worth retrying: 5xx, connection reset, timeout, truncated body."""

    retryable = True


class OverloadedError(TransientError):
    """429 or 503: retry after backing off, and ease the pressure on the server."""

    overloaded = True


class FatalBackendError(BackendError):
    """A fault another attempt cannot fix: bad request, authentication, unknown model."""


class BackendConfigError(ValueError):
    """A backend cannot be built from its configuration (bad input, exit code 2).

    Attributes:
        field: Dotted option path the problem is about, e.g. ``options.model_path``.
    """

    def __init__(self, message: str, *, field: str = "") -> None:
        super().__init__(message)
        self.field = field


class ConnectionRefused(TransientError):
    """Nothing listens at the server's address. Worth retrying only once the server has
    answered before (a restart); on first contact it means a wrong address or a stopped server.
    """


class EgressRefused(PermissionError):
    """A connection, request or redirect somewhere the user did not allow, refused by biasim's
    egress guard (:mod:`simulator.llm.netguard`) before a byte left.

    An ``OSError`` (``EACCES``) so that every HTTP client treats it as a failed connection and
    passes it on; its text carries :data:`MARK`, which survives clients that fold several
    failures into one message.
    """

    MARK = "egress refused by biasim"

    def __init__(self, message: str) -> None:
        super().__init__(errno.EACCES, f"{self.MARK}: {message}")


def egress_refusal(exc: BaseException) -> FatalBackendError | None:
    """The guard's refusal found anywhere under ``exc`` (causes, contexts, exception groups),
    as a final failure naming where the request would have gone; ``None`` when there is none.
    """
    seen: set[int] = set()
    pending: list[BaseException] = [exc]
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, EgressRefused):
            return FatalBackendError(str(current.strerror))
        text = str(current)
        if EgressRefused.MARK in text:
            return FatalBackendError(text[text.index(EgressRefused.MARK) :])
        pending += [e for e in (current.__cause__, current.__context__) if e is not None]
        if isinstance(current, BaseExceptionGroup):
            pending += list(current.exceptions)
    return None


def connection_failure(exc: BaseException) -> BackendError | None:
    """The real reason a transport wrapped, found along the exception's causes.

    SDKs report a refused connection as "request timed out" or "connection error" and a reset
    under their own names; the operating system's error underneath says what happened.

    Args:
        exc: The exception a backend raised (normalised or not).

    Returns:
        The egress guard's refusal (final: see :func:`egress_refusal`), else
        :class:`ConnectionRefused` or a :class:`TransientError` naming the reset, or ``None``
        when the chain holds none of them.
    """
    refused = egress_refusal(exc)
    if refused is not None:
        return refused
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, ConnectionRefusedError):
            return ConnectionRefused(f"connection refused: {cause.strerror or cause}")
        if isinstance(cause, ConnectionResetError):
            return TransientError(f"connection reset by the server: {cause.strerror or cause}")
        cause = cause.__cause__ or cause.__context__
    return None
