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
