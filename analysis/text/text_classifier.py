"""A ``transformers`` sequence classifier by hub id or local path, batched on the CPU or a GPU.

The style scorers (sentiment, formality, agency) and the NLI scorer all ask one thing of a
model: class probabilities for many short inputs (single texts, or premise/hypothesis pairs).
:class:`HuggingFaceClassifier` loads any ``AutoModelForSequenceClassification`` checkpoint,
refuses one of another kind before anything is scored (an MLM would load with a random head
and classify noise), and runs the inputs through the model in length-sorted batches.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from biasim.analysis.text.hf import (
    ModelLoadError,
    batch_size_for,
    load_pretrained,
    model_revision,
    torch_device,
)


def _is_sequence_classifier(config: Any) -> bool:
    architectures = getattr(config, "architectures", None) or []
    return any(a.endswith("ForSequenceClassification") for a in architectures)


class HuggingFaceClassifier:
    """Class probabilities from a ``transformers`` sequence-classification model.

    Args:
        model: Hub id (e.g. ``distilbert-base-uncased-finetuned-sst-2-english``) or local folder
            holding the model and its tokenizer.
        batch_size: Inputs per forward pass (None: 32 on the CPU, more on a GPU).
        max_length: Truncation length in tokens.
        threads: torch CPU threads; None leaves torch's setting (the machines here have 2 cores,
            and torch's default of one thread per core is right for them).
        device: ``auto`` (a CUDA GPU when torch sees one, else the CPU), ``cpu`` or ``cuda``.

    Raises:
        ModelLoadError: The model does not load, or is not a sequence classifier.
    """

    def __init__(
        self,
        model: str,
        batch_size: int | None = None,
        max_length: int = 512,
        threads: int | None = None,
        device: str = "auto",
    ) -> None:
        import torch
        from transformers import AutoConfig

        if threads:
            torch.set_num_threads(threads)
        try:
            config = AutoConfig.from_pretrained(model)
        except (OSError, ValueError) as exc:
            raise ModelLoadError(
                f"`{model}` does not load as a transformers model (expected a hub id or a local"
                f" folder with config.json): {exc}"
            ) from exc
        if not _is_sequence_classifier(config):
            found = ", ".join(getattr(config, "architectures", None) or ["no architecture"])
            raise ModelLoadError(
                f"`{model}` is a {found}, expected a sequence classifier"
                " (an architecture ending in ForSequenceClassification)"
            )
        self.model_name = model
        self.device = torch_device(device)
        self.batch_size = batch_size_for(self.device, batch_size, 32)
        self.max_length = max_length
        self.tokenizer, self.model = load_pretrained(
            "AutoModelForSequenceClassification", model, self.device
        )
        self.labels: tuple[str, ...] = tuple(
            str(self.model.config.id2label[i]) for i in range(self.model.config.num_labels)
        )
        self._fingerprint = model_revision(model, self.model)

    def identity(self) -> dict[str, Any]:
        """Model id, architecture, revision (or local files' fingerprint), labels, truncation."""
        return {
            "model": self.model_name,
            "architecture": type(self.model).__name__,
            "revision": self._fingerprint,
            "labels": list(self.labels),
            "max_length": self.max_length,
        }

    def label_index(self, wanted: str) -> int:
        """Index of the label named ``wanted`` (case-insensitive).

        Raises:
            ModelLoadError: The model has no such label.
        """
        lowered = [label.lower() for label in self.labels]
        if wanted.lower() not in lowered:
            raise ModelLoadError(
                f"`{self.model_name}` has labels {list(self.labels)}, expected one named `{wanted}`"
            )
        return lowered.index(wanted.lower())

    def probabilities(self, texts: Sequence[str], pairs: Sequence[str] | None = None) -> np.ndarray:
        """Softmax class probabilities, ``(len(texts), len(labels))``.

        Args:
            texts: Inputs (the premises when ``pairs`` is given).
            pairs: Second inputs of sentence pairs (NLI hypotheses), or None.
        """
        import torch

        out = np.zeros((len(texts), len(self.labels)), dtype=np.float64)
        if not texts:
            return out
        second = list(pairs) if pairs is not None else None
        encoded = self.tokenizer(list(texts), second, truncation=True, max_length=self.max_length)
        # Longest first keeps padding small within a batch; results go back by index.
        order = sorted(range(len(texts)), key=lambda i: -len(encoded["input_ids"][i]))
        keys = [k for k in encoded if k in ("input_ids", "attention_mask", "token_type_ids")]
        with torch.inference_mode():
            for start in range(0, len(order), self.batch_size):
                rows = order[start : start + self.batch_size]
                batch = self.tokenizer.pad(
                    {k: [encoded[k][i] for i in rows] for k in keys}, return_tensors="pt"
                )
                logits = self.model(**batch.to(self.device)).logits.float()
                out[rows] = torch.softmax(logits, dim=-1).double().cpu().numpy()
        return out
