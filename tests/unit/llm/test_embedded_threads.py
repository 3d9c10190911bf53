"""The embedded model's threads: by default the cores not already busy (one under load), so a
loaded machine does not make every token wait for a core; ``n_threads`` still decides."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest

from biasim.simulator.llm import local
from biasim.simulator.llm.local import idle_cores


@pytest.mark.parametrize(("load", "threads"), [(0.0, 8), (2.5, 5), (7.9, 1), (40.0, 1)])
def test_threads_default_to_the_idle_cores(monkeypatch, load: float, threads: int) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)), raising=False)
    monkeypatch.setattr(os, "getloadavg", lambda: (load, 0.0, 0.0))
    assert idle_cores() == threads


def _backend(tmp_path, **options) -> local.LocalBackend:
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF" + bytes(16))  # the header is all the constructor reads
    role = SimpleNamespace(options={"model_path": str(model), **options}, model=None)
    return local.LocalBackend(role)


def test_the_backend_uses_them_unless_n_threads_is_set(monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(local, "idle_cores", lambda: 3)
    assert _backend(tmp_path).n_threads == 3
    assert _backend(tmp_path, n_threads=6).n_threads == 6
