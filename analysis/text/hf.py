"""Loading a transformers model, one way for every text scorer that uses one."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
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


def model_revision(model: str, network: Any) -> str | None:
    """What identifies the model's weights in a cache key: a local folder's file listing
    (names, sizes, mtimes: it changes when the files do), else the hub commit it came from."""
    local = Path(model)
    if not local.is_dir():
        return getattr(network.config, "_commit_hash", None)
    listing = sorted(
        (p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in local.iterdir() if p.is_file()
    )
    return hashlib.sha256(json.dumps(listing).encode()).hexdigest()[:16]
