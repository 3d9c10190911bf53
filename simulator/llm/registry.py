"""The backend protocol and the registry that finds a backend by name.

Backends live in :data:`biasim.registry.BACKENDS`, registered by import path so a study that only
uses the synthetic responder never pays for importing llama.cpp, openai or langchain.
Third-party packages add backends through the ``biasim.backends`` entry-point group.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from biasim.registry import BACKENDS, UnknownPlugin
from biasim.simulator.llm.errors import BackendConfigError
from biasim.simulator.llm.types import LLMRequest, LLMResponse


@runtime_checkable
class Backend(Protocol):
    """What every backend provides.

    Attributes:
        name: Registry name.
        synthetic: True only for the synthetic responder; reports label its output as such.
        default_concurrency: Concurrent calls when the role does not set ``max_concurrency``.

    Optional attributes (read with defaults, see :func:`unsupported_setting`):
        endpoints: Request kinds served, default ``("chat",)``; ``"completions"`` means a plain
            prompt string for base models.
        sampling_extras: Optional sampling parameters sent (``frequency_penalty``,
            ``presence_penalty``, ``stop``); default none.
        adapts_per_server: True when the backend spreads calls over several servers and adapts
            each one's concurrency itself; the role's bound then stays fixed. Default false.
        reasks: False for a decision tool (``http``, ``python``), which reads no instructions:
            an invalid answer is kept, not asked again with the error quoted. Default true.
    """

    name: str
    synthetic: bool
    default_concurrency: int

    def identity(self) -> dict[str, Any]:
        """Everything about the backend that changes its answers (model id, model file, ...).

        It enters the cache key and the manifest, so it must never hold a secret.
        """
        ...

    async def generate(self, request: LLMRequest) -> LLMResponse:
        """Answer one request with raw text and token counts.

        Raises:
            BackendError: Normalised failure the retry layer understands.
        """
        ...

    async def aclose(self) -> None:
        """Release clients, threads and models."""
        ...


class RoleSettings(Protocol):
    """The parts of a role's configuration a backend reads."""

    backend: str
    model: str | None
    options: dict[str, Any]


def unsupported_setting(backend: Backend, role: Any) -> tuple[str, str] | None:
    """A setting of ``role`` that ``backend`` would silently ignore, as ``(field, message)``.

    The synthetic responder answers from declarations, not from sampling, so it takes any.
    """
    if backend.synthetic:
        return None
    endpoints = getattr(backend, "endpoints", ("chat",))
    if role.endpoint not in endpoints:
        return "endpoint", (
            f"the {backend.name} backend has no `{role.endpoint}` endpoint "
            f"(it serves: {', '.join(endpoints)})"
        )
    extras = getattr(backend, "sampling_extras", frozenset())
    for name in ("frequency_penalty", "presence_penalty", "stop"):
        if getattr(role, name) is not None and name not in extras:
            return name, f"the {backend.name} backend does not send `{name}`"
    return None


def register_backend(name: str, factory: Any) -> None:
    """Register ``factory(role) -> Backend`` (a class or callable, or a ``"module:attr"`` path)."""
    BACKENDS.register(name, factory)


def backend_names() -> list[str]:
    """Names of every available backend."""
    return BACKENDS.names()


def create_backend(role: RoleSettings) -> Backend:
    """Build the backend a role names.

    Raises:
        BackendConfigError: Unknown backend or unusable options (bad input, exit code 2).
    """
    try:
        factory = BACKENDS.load(role.backend)
    except UnknownPlugin:
        raise BackendConfigError(f"unknown backend `{role.backend}`", field="backend") from None
    return factory(role)
