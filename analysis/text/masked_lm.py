"""Masked language models for PRISM: the probabilities of given vocabulary words at one mask.

:class:`MaskedLM` is what the PRISM scorer needs; :class:`HuggingFaceMaskedLM` serves it from
any ``transformers`` ``AutoModelForMaskedLM`` (a hub id or a local folder). It batches many
masked copies through the model at once (padding, attention masks, truncation at 512), sorts
them by length so batches carry little padding, and runs the prediction head only at the mask
positions; the softmax is over the whole vocabulary, as the authors', and only the word-list
columns are returned.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np

from biasim.analysis.text.hf import batch_size_for, load_pretrained, model_revision, torch_device


class MaskedLM(Protocol):
    """What the PRISM scorer asks of a masked language model."""

    def identity(self) -> dict[str, Any]:
        """Everything about the model that changes its probabilities (enters the cache key)."""
        ...

    def tokenize(self, sentence: str) -> list[str]:
        """The model's tokens of ``sentence`` (WordPiece for BERT)."""
        ...

    def masked_text(self, tokens: Sequence[str], index: int) -> str:
        """``tokens`` as text with token ``index`` replaced by the mask token."""
        ...

    def vocab_ids(self, words: Sequence[str]) -> list[int]:
        """Vocabulary ids of ``words`` (tokens, ``##`` pieces allowed)."""
        ...

    def mask_probabilities(
        self, texts: Sequence[str], ids: Sequence[int], progress: Callable[[int], None] | None
    ) -> np.ndarray:
        """Probabilities of vocabulary ``ids`` at the single mask of each text.

        Args:
            texts: Texts holding one mask token each.
            ids: Vocabulary ids to read.
            progress: Called with the number of texts finished after each batch.

        Returns:
            ``(len(texts), len(ids))`` float32; a row is NaN when its mask was cut off by
            truncation (the text does not hold exactly one mask after tokenisation).
        """
        ...


class HuggingFaceMaskedLM:
    """A ``transformers`` masked LM by hub id or local path.

    Args:
        model: Hub id (``bert-base-uncased``, the paper's) or a local folder with the model and
            its tokenizer.
        batch_size: Masked copies per forward pass (None: 64 on the CPU, more on a GPU).
        max_length: Truncation length in tokens (512 as the authors).
        threads: torch CPU threads; None leaves torch's setting.
        device: ``auto`` (a CUDA GPU when torch sees one, else the CPU), ``cpu`` or ``cuda``.
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

        if threads:
            torch.set_num_threads(threads)
        self.model_name = model
        self.device = torch_device(device)
        self.batch_size = batch_size_for(self.device, batch_size, 64)
        self.max_length = max_length
        self.tokenizer, self.model = load_pretrained("AutoModelForMaskedLM", model, self.device)
        self._head = _prediction_head(self.model)
        self._fingerprint = model_revision(model, self.model)

    def identity(self) -> dict[str, Any]:
        """Model id, architecture, revision (or local files' fingerprint) and truncation."""
        return {
            "model": self.model_name,
            "architecture": type(self.model).__name__,
            "revision": self._fingerprint,
            "max_length": self.max_length,
        }

    def tokenize(self, sentence: str) -> list[str]:
        """WordPiece tokens of ``sentence``."""
        return self.tokenizer.tokenize(sentence)

    def masked_text(self, tokens: Sequence[str], index: int) -> str:
        """The authors' masked copy: tokens back to a string with one mask."""
        parts = [*tokens[:index], self.tokenizer.mask_token, *tokens[index + 1 :]]
        return self.tokenizer.convert_tokens_to_string(parts)

    def vocabulary(self) -> set[str]:
        """Every token of the tokenizer's vocabulary (to filter word lists)."""
        return set(self.tokenizer.get_vocab())

    def vocab_ids(self, words: Sequence[str]) -> list[int]:
        """Vocabulary ids of ``words`` (the unknown token's id for words outside it)."""
        return list(self.tokenizer.convert_tokens_to_ids(list(words)))

    def mask_probabilities(
        self,
        texts: Sequence[str],
        ids: Sequence[int],
        progress: Callable[[int], None] | None = None,
        batch_size: int | None = None,
    ) -> np.ndarray:
        """See :meth:`MaskedLM.mask_probabilities`; ``batch_size`` overrides the default."""
        import torch

        size = batch_size or self.batch_size
        columns = torch.as_tensor(list(ids), dtype=torch.long, device=self.device)
        out = np.full((len(texts), len(columns)), np.nan, dtype=np.float32)
        encoded = self.tokenizer(
            list(texts), truncation=True, max_length=self.max_length, add_special_tokens=True
        )["input_ids"]
        # Longest first keeps padding small within a batch; results go back by index.
        order = sorted(range(len(texts)), key=lambda i: -len(encoded[i]))
        mask_id = self.tokenizer.mask_token_id
        with torch.inference_mode():
            for start in range(0, len(order), size):
                rows = order[start : start + size]
                batch = self.tokenizer.pad(
                    {"input_ids": [encoded[i] for i in rows]}, return_tensors="pt"
                )
                is_mask = batch["input_ids"] == mask_id
                ok = is_mask.sum(1) == 1
                probs = self._mask_probs(batch, is_mask, ok)
                if probs is not None:
                    good = [r for r, keep in zip(rows, ok.tolist(), strict=True) if keep]
                    out[good] = probs[:, columns].cpu().numpy()
                if progress:
                    progress(len(rows))
        return out

    def _mask_probs(self, batch: Any, is_mask: Any, ok: Any) -> Any:
        import torch

        if not bool(ok.any()):
            return None
        batch = {key: value[ok].to(self.device) for key, value in batch.items()}
        is_mask = is_mask[ok].to(self.device)
        if self._head is None:
            logits = self.model(**batch).logits[is_mask]
        else:
            hidden = self.model.base_model(**batch)[0]
            logits = self._head(hidden[is_mask])
        return torch.softmax(logits.float(), dim=-1)


def _prediction_head(model: Any) -> Callable[[Any], Any] | None:
    """The model's masked-LM head as a function of hidden states, or None (use full logits).

    Running the head only at the masks skips a vocabulary-wide projection per position: that
    projection costs more than a small encoder's layers.
    """
    for attr in ("cls", "lm_head"):  # BERT family; RoBERTa, XLM-R, ...
        head = getattr(model, attr, None)
        if head is not None:
            return head
    if all(hasattr(model, a) for a in ("vocab_transform", "vocab_layer_norm", "vocab_projector")):

        def distilbert_head(hidden: Any) -> Any:
            hidden = model.activation(model.vocab_transform(hidden))
            return model.vocab_projector(model.vocab_layer_norm(hidden))

        return distilbert_head
    return None
