"""Loading a transformers model, one way for every text scorer that uses one, on CPU or GPU."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

#: What an analysis's ``device:`` may say: ``auto`` is a CUDA GPU when torch sees one, else the CPU.
DEVICES = ("auto", "cpu", "cuda")
#: A forward pass on a GPU is parallel over the batch, and these models' activations are small:
#: without a batch size given, a GPU takes this many times the CPU's.
GPU_BATCH_FACTOR = 8


class ModelLoadError(ValueError):
    """A model path or id that does not load, or loads as the wrong kind of model, or a
    device that is not there."""


def torch_device(device: str) -> str:
    """The torch device a model runs on (``cpu`` or ``cuda``).

    Raises:
        ModelLoadError: ``cuda`` where torch sees no GPU, or a device not in :data:`DEVICES`.
    """
    if device not in DEVICES:
        raise ModelLoadError(f"device `{device}`: expected one of {', '.join(DEVICES)}")
    if device == "cpu":
        return "cpu"
    import torch

    if torch.cuda.is_available():
        return "cuda"
    if device == "cuda":
        raise ModelLoadError(
            "device `cuda`: torch sees no CUDA GPU here (torch.cuda.is_available() is False); "
            "use `device: auto` (the CPU when there is no GPU) or `cpu`"
        )
    return "cpu"


def batch_size_for(device: str, given: int | None, cpu_default: int) -> int:
    """``given`` when set, else ``cpu_default`` on the CPU and :data:`GPU_BATCH_FACTOR` times it
    on a GPU (``device`` as :func:`torch_device` returns it)."""
    if given is not None:
        return given
    return cpu_default * (GPU_BATCH_FACTOR if device == "cuda" else 1)


def load_pretrained(auto_class: str, model: str, device: str = "cpu") -> tuple[Any, Any]:
    """A tokenizer and a model in eval mode from a hub id or a local folder, on ``device``.

    Args:
        auto_class: The transformers auto class, e.g. ``AutoModelForMaskedLM``.
        model: Hub id or local folder.
        device: ``cpu`` or ``cuda`` (see :func:`torch_device`).

    transformers' own progress bars are switched off: they would break biasim's progress lines
    and logs.
    """
    import transformers

    transformers.utils.logging.disable_progress_bar()
    tokenizer = transformers.AutoTokenizer.from_pretrained(model)
    network = getattr(transformers, auto_class).from_pretrained(model)
    network.eval()
    return tokenizer, network.to(device)


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
