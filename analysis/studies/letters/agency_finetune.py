"""The authors' agency classifier, rebuilt: a ``transformers`` sequence classifier fine-tuned
from a base model on a labelled CSV (seed 002, Appendix F.2).

Wan et al. fine-tuned bert-base-uncased on their agency dataset (``text,label``; 1 = agentic,
0 = communal; lower-cased) with learning rate 2e-5, 10 epochs, batch size 8 and weight decay 0.01
(their released training script). :class:`AgencyFinetunedScorer` does the same with any base
model (hub id or local folder), saves the fine-tuned model in a folder named by a digest of
(training file, base model, hyper-parameters) under ``cache_dir`` (a run's ``models/``), so a
reanalysis loads it instead of training again, and scores sentences through
:class:`analysis.style_scorers.ClassifierScorer`.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from biasim.analysis.text.hf import model_revision
from biasim.analysis.text.scorers import ScoreTable
from biasim.analysis.text.style_scorers import STYLE_COLUMNS, ClassifierScorer, read_labelled

LABELS = {0: "communal", 1: "agentic"}
#: The file beside the weights that records what they were trained from.
TRAINING_RECORD = "biasim_training.json"


def finetune(
    texts: Sequence[str],
    labels: Sequence[int],
    base_model: str,
    out: Path,
    *,
    epochs: int,
    learning_rate: float,
    batch_size: int,
    weight_decay: float,
    max_length: int,
    seed: int,
) -> float:
    """Fine-tune ``base_model`` as a two-class sequence classifier and save it in ``out``.

    The classification head is new (a masked-LM checkpoint such as bert-base-uncased has none).
    Batches are shuffled with ``seed``; the optimiser is AdamW as transformers' Trainer uses.

    Returns:
        Accuracy on the training texts after the last epoch.
    """
    import torch
    import transformers

    transformers.utils.logging.disable_progress_bar()
    torch.manual_seed(seed)
    tokenizer = transformers.AutoTokenizer.from_pretrained(base_model)
    # "Some weights were newly initialized" is the point of fine-tuning, not news for the log.
    level = transformers.utils.logging.get_verbosity()
    transformers.utils.logging.set_verbosity_error()
    try:
        model = transformers.AutoModelForSequenceClassification.from_pretrained(
            base_model,
            num_labels=2,
            id2label=LABELS,
            label2id={v: k for k, v in LABELS.items()},
            ignore_mismatched_sizes=True,
        )
    finally:
        transformers.utils.logging.set_verbosity(level)
    encoded = tokenizer(list(texts), truncation=True, max_length=max_length)
    target = torch.tensor(list(labels), dtype=torch.long)
    optimiser = torch.optim.AdamW(model.parameters(), lr=learning_rate, weight_decay=weight_decay)
    order = torch.Generator().manual_seed(seed)
    keys = [k for k in ("input_ids", "attention_mask", "token_type_ids") if k in encoded]

    def batch_of(rows: list[int]) -> dict[str, Any]:
        return tokenizer.pad({k: [encoded[k][i] for i in rows] for k in keys}, return_tensors="pt")

    model.train()
    for _ in range(epochs):
        for chunk in torch.randperm(len(texts), generator=order).split(batch_size):
            rows = chunk.tolist()
            loss = model(**batch_of(rows), labels=target[rows]).loss
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
    model.eval()
    correct = 0
    with torch.inference_mode():
        for chunk in torch.arange(len(texts)).split(64):
            rows = chunk.tolist()
            predicted = model(**batch_of(rows)).logits.argmax(dim=-1)
            correct += int((predicted == target[rows]).sum())
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return correct / len(texts)


class AgencyFinetunedScorer:
    """Agentic vs communal sentences by a classifier fine-tuned here from a labelled CSV.

    Args:
        train_csv: ``text,label`` CSV (1 = agentic, 0 = communal), e.g. the released
            ``agency_dataset/train.csv``.
        base_model: Hub id or local folder of the model to fine-tune (the authors':
            ``bert-base-uncased``).
        cache_dir: Folder of fine-tuned models (the letters kind gives the run's ``models/``).
        epochs, learning_rate, batch_size, weight_decay: As the authors' defaults.
        max_length: Truncation length in tokens.
        seed: Seed of the head's initialisation and of the batch order.
        threads: torch CPU threads while training and scoring.

    Raises:
        ValueError: The CSV is unusable (see :func:`read_labelled`).
        ModelLoadError: The fine-tuned model does not load as a classifier.
    """

    name = "agency_finetuned"
    version = "1"
    columns = STYLE_COLUMNS
    #: The letters kind fills ``cache_dir`` with the run's model folder.
    uses_cache_dir = True

    def __init__(
        self,
        train_csv: str | Path,
        base_model: str = "bert-base-uncased",
        cache_dir: str | Path | None = None,
        epochs: int = 10,
        learning_rate: float = 2e-5,
        batch_size: int = 8,
        weight_decay: float = 0.01,
        max_length: int = 128,
        seed: int = 0,
        threads: int = 2,
    ) -> None:
        import torch

        torch.set_num_threads(threads)
        frame, digest = read_labelled(Path(train_csv))
        hyper = {
            "epochs": epochs,
            "learning_rate": learning_rate,
            "batch_size": batch_size,
            "weight_decay": weight_decay,
            "max_length": max_length,
            "seed": seed,
        }
        base = Path(base_model)
        # A local base is named by its files (they may change); a hub id by itself.
        base_id = model_revision(base_model, None) if base.is_dir() else base_model
        self.identity = {"train": digest, "base_model": base_id, **hyper}
        key = hashlib.sha256(json.dumps(self.identity, sort_keys=True).encode()).hexdigest()
        root = Path(cache_dir) if cache_dir is not None else Path(tempfile.gettempdir())
        self.folder = root / f"agency-{key[:16]}"
        self.trained_now = not (self.folder / TRAINING_RECORD).is_file()
        if self.trained_now:
            self._train(frame, base_model, hyper)
        self._classifier = ClassifierScorer(str(self.folder), tracked="agentic", lowercase=True)

    def _train(self, frame: Any, base_model: str, hyper: dict[str, Any]) -> None:
        """Fine-tune into a temporary folder, then move it in whole: a crash leaves no half
        model that a rerun would load."""
        self.folder.parent.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=".agency-", dir=self.folder.parent))
        try:
            accuracy = finetune(
                frame["text"].astype(str).str.lower().tolist(),
                frame["label"].astype(int).tolist(),
                base_model,
                work,
                **hyper,
            )
            record = {**self.identity, "base_model_given": base_model, "train_accuracy": accuracy}
            (work / TRAINING_RECORD).write_text(json.dumps(record, indent=2))
            os.replace(work, self.folder)
        finally:
            shutil.rmtree(work, ignore_errors=True)

    def params(self) -> dict[str, Any]:
        """What the model was trained from (file digest, base model, hyper-parameters)."""
        return self.identity

    def score(self, texts: Sequence[str]) -> ScoreTable:
        """P(agentic) of each (lower-cased) sentence and its label."""
        return self._classifier.score(texts)
