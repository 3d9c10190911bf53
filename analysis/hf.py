"""Loading a transformers model, one way for every text scorer that uses one."""

from __future__ import annotations

from typing import Any


def load_pretrained(auto_class: str, model: str) -> tuple[Any, Any]:
    """A tokenizer and a model in eval mode from a hub id or a local folder.

    Args:
        auto_class: The transformers auto class, e.g. ``AutoModelForMaskedLM``.
        model: Hub id or local folder.

    transformers' own progress bars are switched off: they would break biasim's progress lines
    and logs.
    """
    import transformers

    transformers.utils.logging.disable_progress_bar()
    tokenizer = transformers.AutoTokenizer.from_pretrained(model)
    network = getattr(transformers, auto_class).from_pretrained(model)
    network.eval()
    return tokenizer, network
