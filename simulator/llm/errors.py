"""Errors backends raise, normalised so one retry layer can treat every provider alike."""

from __future__ import annotations


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


def connection_failure(exc: BaseException) -> BackendError | None:
    """The real reason a transport wrapped, found along the exception's causes.

    SDKs report a refused connection as "request timed out" or "connection error" and a reset
    under their own names; the operating system's error underneath says what happened.

    Args:
        exc: The exception a backend raised (normalised or not).

    Returns:
        :class:`ConnectionRefused` or a :class:`TransientError` naming the reset, or ``None``
        when the chain holds neither.
    """
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
