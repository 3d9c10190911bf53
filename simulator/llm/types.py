"""The one request/response model at the LLM boundary.

Every backend receives an :class:`LLMRequest` and returns an :class:`LLMResponse`; nothing else
crosses the boundary, so caching, retries, accounting and the store treat all providers alike.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Message = dict[str, str]
Status = Literal["answered", "invalid", "error"]
Endpoint = Literal["chat", "completions"]


# Not frozen: one is built per call, and a frozen dataclass of this size takes 2.7 us to build
# against 0.6 (a twentieth of a stage action). Nothing changes a request after it is built:
# variants are made with `dataclasses.replace`.
@dataclass(slots=True)
class LLMRequest:
    """One call to a language model.

    Attributes:
        messages: Chat messages, each ``{"role": ..., "content": ...}``.
        temperature: Sampling temperature.
        top_p: Nucleus-sampling mass.
        max_tokens: Upper bound on generated tokens; ``None`` sets none (the server's or the
            model's own limit).
        seed: Sampling seed for this call (derived per unit, so identical prompts of distinct
            agents are distinct samples).
        json_schema: JSON Schema the answer must satisfy, or ``None`` for free text.
        replicate: Replicate index; part of the cache key so replicates are distinct calls.
        attributes: Persona attribute values of the acting agent. Real models never see these
            (they only see the rendered messages); the synthetic responder draws from them.
        frequency_penalty: OpenAI-style frequency penalty, or ``None`` to send none.
        presence_penalty: OpenAI-style presence penalty, or ``None`` to send none.
        stop: Stop sequences, or ``None``.
        endpoint: ``chat`` (messages) or ``completions`` (one prompt string, see
            :func:`completion_prompt`, for base models).
    """

    messages: tuple[Message, ...]
    temperature: float
    top_p: float
    max_tokens: int | None
    seed: int
    json_schema: dict[str, Any] | None = None
    replicate: int = 0
    attributes: tuple[tuple[str, str], ...] = ()
    frequency_penalty: float | None = None
    presence_penalty: float | None = None
    stop: tuple[str, ...] | None = None
    endpoint: Endpoint = "chat"
    #: For a reading: the persona attributes each shown document stands for, in the order
    #: shown (empty where a name is redacted). Only the synthetic responder reads them.
    shown: tuple[tuple[tuple[str, str], ...], ...] = ()
    #: For a word-pairing call: the items in the order shown (the targets are in ``shown``,
    #: each with its ``name``). Only the synthetic responder reads them.
    items: tuple[str, ...] = ()
    #: For a word-pairing call: how many targets the answer names per item.
    picks: int = 1
    #: Alternatives per generated token whose log-probabilities the backend returns (0: none);
    #: a stage with ``answer: logprobs`` asks for them.
    top_logprobs: int = 0


@dataclass(slots=True)
class LLMResponse:
    """What came back from one call (or from the cache).

    Attributes:
        text: Raw answer text, kept verbatim even when it is invalid.
        parsed: The structured answer when a schema was requested and the text satisfied it.
        status: ``answered`` (valid), ``invalid`` (answered but broke the structure) or
            ``error`` (no answer after every retry).
        error: Validation error or failure reason.
        prompt_tokens: Tokens in the prompt, as reported by the backend.
        completion_tokens: Tokens generated.
        latency_s: Wall time of the successful attempt, seconds.
        attempts: Attempts made by the retry layer (1 when the first try answered).
        cached: True when served from the call store without contacting the backend.
        reasks: Re-asks made after a structurally invalid answer.
        truncated: The answer stopped at ``max_tokens`` (finish reason ``length``), not where
            the model ended it.
        server: Base URL (without credentials) of the server that answered, for backends
            that may spread a role over several.
        first_cached: For an answer from this run's own store (a resume): ``cached`` as it
            was when the answer was first recorded, so a resumed run's results say where each
            answer came from, not that the resume found it; None otherwise.
    """

    text: str = ""
    parsed: dict[str, Any] | None = None
    status: Status = "answered"
    error: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_s: float = 0.0
    attempts: int = 1
    cached: bool = False
    reasks: int = 0
    truncated: bool = False
    server: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    first_cached: bool | None = None
    #: Per generated token (when ``top_logprobs`` was asked): its text and its most likely
    #: alternatives' log-probabilities, ``{token text: logprob}``.
    token_logprobs: list[tuple[str, dict[str, float]]] | None = None
    #: A decision's option probabilities read from the log-probabilities of its first token.
    probabilities: dict[str, float] | None = None

    @property
    def valid(self) -> bool:
        """Whether the answer satisfied the requested structure."""
        return self.status == "answered"

    @property
    def from_store(self) -> bool:
        """Whether the answer first came from a store, not the model (the results'
        ``cached``): a resume finding its own answers changes nothing."""
        return self.cached if self.first_cached is None else self.first_cached


def completion_prompt(messages: tuple[Message, ...]) -> str:
    """The one prompt string a completions endpoint gets for chat ``messages``.

    The contents in order, separated by one blank line, without role names: a base model
    continues the text as it stands, so a stage's ``completion`` prompt (one user message) is
    sent exactly as written, and a system message reads as the text's opening paragraph.

    Args:
        messages: The rendered chat messages.

    Returns:
        The prompt.
    """
    return "\n\n".join(m["content"] for m in messages)


def extra_sampling(request: LLMRequest) -> dict[str, Any]:
    """The optional sampling parameters ``request`` sets, by their OpenAI names (llama.cpp and
    Ollama use the same): penalties and stop sequences, only those that are set."""
    extra: dict[str, Any] = {}
    if request.frequency_penalty is not None:
        extra["frequency_penalty"] = request.frequency_penalty
    if request.presence_penalty is not None:
        extra["presence_penalty"] = request.presence_penalty
    if request.stop is not None:
        extra["stop"] = list(request.stop)
    return extra
