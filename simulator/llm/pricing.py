"""What a call costs: the pricing table shipped with biasim and the study's own prices.

Prices are US dollars per million tokens, input and output, live and through a provider's
batch API. The table is a snapshot of the providers' public price pages on
:data:`PRICES_DATE`; prices change, so a study overrides or extends it with ``prices:`` (or
``--prices FILE``), and every report names the date and source of the prices it used.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: When the table below was copied from the providers' price pages.
PRICES_DATE = "2025-06-01"

#: Backends that never bill: the model runs in this process or on the user's own server.
FREE_BACKENDS = frozenset({"local", "ollama"})


@dataclass(frozen=True, slots=True)
class Price:
    """USD per million tokens for one model.

    Attributes:
        input: Prompt tokens, live.
        output: Generated tokens, live.
        batch_input: Prompt tokens through the batch API (``None``: no batch API).
        batch_output: Generated tokens through the batch API.
        source: Where the price comes from (the shipped table and its date, a study, a file).
    """

    input: float
    output: float
    batch_input: float | None = None
    batch_output: float | None = None
    source: str = f"biasim price table of {PRICES_DATE}"

    def cost(self, prompt_tokens: float, completion_tokens: float, batch: bool = False) -> float:
        """USD for a call (or a sum of calls) of these token counts.

        Raises:
            ValueError: ``batch`` asked of a model without a batch price.
        """
        if batch:
            if self.batch_input is None or self.batch_output is None:
                raise ValueError("no batch price")
            return (prompt_tokens * self.batch_input + completion_tokens * self.batch_output) / 1e6
        return (prompt_tokens * self.input + completion_tokens * self.output) / 1e6

    def as_dict(self) -> dict[str, Any]:
        """The price as the manifest and reports record it."""
        return {
            "input_per_mtok": self.input,
            "output_per_mtok": self.output,
            "batch_input_per_mtok": self.batch_input,
            "batch_output_per_mtok": self.batch_output,
            "source": self.source,
        }


FREE = Price(0.0, 0.0, 0.0, 0.0, source="no charge: the model runs on your own hardware")
#: The synthetic responder is a test double, not a model: it sends no request at all.
NO_REQUEST = Price(
    0.0, 0.0, 0.0, 0.0, source="no charge: the synthetic test double sends no request"
)


def _half(live_in: float, live_out: float) -> Price:
    # Both OpenAI's Batch API and Anthropic's Message Batches bill half the live price.
    return Price(live_in, live_out, live_in / 2, live_out / 2)


#: Model id (or id prefix: ``gpt-4o-mini`` prices ``gpt-4o-mini-2024-07-18``) -> price.
PRICES: dict[str, Price] = {
    "gpt-4o-mini": _half(0.15, 0.60),
    "gpt-4o": _half(2.50, 10.00),
    "gpt-4.1-nano": _half(0.10, 0.40),
    "gpt-4.1-mini": _half(0.40, 1.60),
    "gpt-4.1": _half(2.00, 8.00),
    "gpt-4-turbo": _half(10.00, 30.00),
    "gpt-3.5-turbo-instruct": Price(1.50, 2.00),
    "gpt-3.5-turbo": _half(0.50, 1.50),
    "o4-mini": _half(1.10, 4.40),
    "o3-mini": _half(1.10, 4.40),
    "claude-3-haiku": _half(0.25, 1.25),
    "claude-3-5-haiku": _half(0.80, 4.00),
    "claude-haiku-4-5": _half(1.00, 5.00),
    "claude-3-5-sonnet": _half(3.00, 15.00),
    "claude-3-7-sonnet": _half(3.00, 15.00),
    "claude-sonnet-4": _half(3.00, 15.00),
    "claude-opus-4": _half(15.00, 75.00),
}


def find_price(backend: str, model: str | None, overrides: dict[str, Price]) -> Price | None:
    """The price of ``model`` on ``backend``: the study's own first (exact id), then the shipped
    table (exact id, else the longest id that prefixes it); free for backends that run on the
    user's hardware; ``None`` when unknown."""
    model = model or ""
    if model in overrides:
        return overrides[model]
    if backend == "synthetic":
        return NO_REQUEST
    if backend in FREE_BACKENDS:
        return FREE
    if model in PRICES:
        return PRICES[model]
    prefixes = [name for name in PRICES if model.startswith(name)]
    return PRICES[max(prefixes, key=len)] if prefixes else None
