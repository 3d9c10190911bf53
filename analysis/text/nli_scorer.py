"""Sentence-level NLI for hallucination detection (Wan et al. 2023, section 3.3).

The premise is the whole biography, each letter sentence a hypothesis; a sentence the NLI model
does not judge entailed (neutral or contradiction) is hallucinated. Pairs travel through the
text-scorer interface as one string, premise and hypothesis joined by :data:`PAIR_SEP`, so the
score cache keys them like any text. There is no offline default: without an NLI model the
hallucination analysis does not run.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from biasim.analysis.text.scorers import ScoreTable
from biasim.analysis.text.text_classifier import HuggingFaceClassifier

PAIR_SEP = "\x1e"  # ASCII record separator: never in a letter or a biography
NLI_COLUMNS = ("hallucinated", "contradiction", "p_entailment")


def pair_text(premise: str, hypothesis: str) -> str:
    """One scorer input from a premise and a hypothesis."""
    return f"{premise}{PAIR_SEP}{hypothesis}"


class NliScorer:
    """Entailment of hypotheses by premises with a ``transformers`` NLI cross-encoder.

    Args:
        model: Hub id or local folder (the paper's:
            ``ynie/roberta-large-snli_mnli_fever_anli_R1_R2_R3-nli``); its labels must include
            ``entailment`` and ``contradiction``.
        batch_size: Pairs per forward pass.
        max_length: Truncation length of a pair in tokens (256 as the authors).

    Raises:
        ModelLoadError: The model does not load, is not a classifier, or has no NLI labels.
    """

    name = "nli"
    version = "1"
    columns = NLI_COLUMNS

    def __init__(
        self, model: str, batch_size: int = 16, max_length: int = 256, device: str = "auto"
    ) -> None:
        self.classifier = HuggingFaceClassifier(
            model, batch_size=batch_size, max_length=max_length, device=device
        )
        self._entail = self.classifier.label_index("entailment")
        self._contra = self.classifier.label_index("contradiction")

    def params(self) -> dict[str, Any]:
        """The model's identity."""
        return {"model": self.classifier.identity()}

    def score(self, texts: Sequence[str]) -> ScoreTable:
        """Hallucinated / contradiction flags and P(entailment) of each ``pair_text``."""
        pairs = [t.split(PAIR_SEP, 1) for t in texts]
        bad = [i for i, p in enumerate(pairs) if len(p) != 2]
        if bad:
            raise ValueError(
                f"NLI inputs need a premise and a hypothesis (pair_text); row {bad[0]}"
            )
        probs = self.classifier.probabilities([p[0] for p in pairs], [p[1] for p in pairs])
        top = probs.argmax(axis=1)
        values = np.column_stack(
            [top != self._entail, top == self._contra, probs[:, self._entail]]
        ).astype(float)
        return ScoreTable(NLI_COLUMNS, values, [None] * len(texts))
