"""The backend protocol and the registry that finds a backend by name.

Backends are registered by import path so a study that only uses the synthetic responder never
pays for importing llama.cpp, openai or langchain. Third-party packages add backends through the
``biasim.backends`` entry-point group.
"""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points
from typing import Any, Protocol, runtime_checkable

from .errors import BackendConfigError
from .types import LLMRequest, LLMResponse


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


_BUILTIN: dict[str, str] = {
    "local": "biasim.simulator.llm.local:LocalBackend",
    "synthetic": "biasim.simulator.llm.synthetic:SyntheticBackend",
    "openai": "biasim.simulator.llm.openai_backend:OpenAIBackend",
    "ollama": "biasim.simulator.llm.ollama_backend:OllamaBackend",
    "langchain": "biasim.simulator.llm.langchain_backend:LangChainBackend",
}
_EXTRA: dict[str, Any] = {}


def register_backend(name: str, factory: Any) -> None:
    """Register ``factory(role) -> Backend`` (a class or callable, or a ``"module:attr"`` path)."""
    _EXTRA[name] = factory


def backend_names() -> list[str]:
    """Names of every available backend."""
    plugins = {ep.name for ep in entry_points(group="biasim.backends")}
    return sorted(set(_BUILTIN) | set(_EXTRA) | plugins)


def create_backend(role: RoleSettings) -> Backend:
    """Build the backend a role names.

    Raises:
        BackendConfigError: Unknown backend or unusable options (bad input, exit code 2).
    """
    factory: Any = _EXTRA.get(role.backend) or _BUILTIN.get(role.backend)
    if factory is None:
        plugins = {ep.name: ep for ep in entry_points(group="biasim.backends")}
        if role.backend not in plugins:
            raise BackendConfigError(f"unknown backend `{role.backend}`", field="backend")
        factory = plugins[role.backend].load()
    if isinstance(factory, str):
        module, _, attr = factory.partition(":")
        factory = getattr(importlib.import_module(module), attr)
    return factory(role)
