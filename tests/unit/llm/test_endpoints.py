"""Keys go only where the user sends them: a study file cannot choose which key goes where."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from biasim.simulator.llm.allowlist import redact_text, redact_url
from tests.loopback_llm_server import LoopbackLLMServer

STUDY = """\
name: key_study
description: where keys go
roles:
  decider:
    backend: openai
    model: loopback-model
    max_attempts: 1
    options: {options}
personas:
  axes:
    gender: [male, female]
  description: "a {{{{ gender }}}} person"
stages:
  - name: decide
    role: decider
    prompt: "You are {{{{ persona.description }}}}. Evacuate or stay?"
    output:
      decision: {{type: choice, choices: [Evacuate, Stay]}}
design:
  agents_per_value: 2
"""


@pytest.fixture
def server():
    with LoopbackLLMServer() as srv:
        yield srv


def _biasim(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "biasim", *args],
        capture_output=True,
        text=True,
        env={k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "OPENAI_BASE_URL")}
        | env,
        timeout=120,
    )


def _study(tmp_path: Path, options: dict[str, str]) -> Path:
    path = tmp_path / "study.yaml"
    path.write_text(STUDY.format(options=json.dumps(options)))
    return path


def test_a_study_naming_another_key_variable_sends_nothing_until_the_user_allows_the_host(
    tmp_path: Path, server: LoopbackLLMServer
) -> None:
    study = _study(tmp_path, {"base_url": server.openai_base_url, "api_key_env": "OTHER_SECRET"})
    env = {"OTHER_SECRET": "s3cret-other", "OPENAI_API_KEY": "sk-real-openai"}
    refused = _biasim("run", str(study), "--out", str(tmp_path / "a"), env=env)
    assert refused.returncode == 2, refused.stderr
    assert "OTHER_SECRET" in refused.stderr and "--allow-endpoint 127.0.0.1:" in refused.stderr
    assert f"{study}:" in refused.stderr  # names the file and line of the field
    assert "Traceback" not in refused.stderr
    assert server.requests == [] and not (tmp_path / "a").exists()

    host = server.openai_base_url.split("//")[1].split("/")[0]
    allowed = _biasim(
        "run", str(study), "--out", str(tmp_path / "b"), "--allow-endpoint", host, env=env
    )
    assert allowed.returncode == 0, allowed.stderr
    seen = {r.headers.get("authorization") for r in server.requests}
    assert seen == {"Bearer s3cret-other"}


def test_the_users_openai_key_does_not_follow_a_study_to_another_server(
    tmp_path: Path, server: LoopbackLLMServer
) -> None:
    study = _study(tmp_path, {"base_url": server.openai_base_url})
    refused = _biasim(
        "run", str(study), "--out", str(tmp_path / "a"), env={"OPENAI_API_KEY": "sk-real"}
    )
    assert refused.returncode == 2, refused.stderr
    assert "OPENAI_API_KEY" in refused.stderr and server.requests == []
    # Without a key in the environment nothing secret can travel: a loopback server is fine.
    plain = _biasim("run", str(study), "--out", str(tmp_path / "b"), env={})
    assert plain.returncode == 0, plain.stderr
    assert {r.headers.get("authorization") for r in server.requests} == {"Bearer not-needed"}


def test_the_users_own_config_file_allows_a_host(tmp_path: Path, server: LoopbackLLMServer) -> None:
    study = _study(tmp_path, {"base_url": server.openai_base_url, "api_key_env": "OTHER_SECRET"})
    config = tmp_path / "config.toml"
    config.write_text('allow_endpoints = ["127.0.0.1"]\n')
    env = {"OTHER_SECRET": "s3cret", "BIASIM_CONFIG": str(config)}
    done = _biasim("run", str(study), "--out", str(tmp_path / "a"), env=env)
    assert done.returncode == 0, done.stderr
    assert {r.headers.get("authorization") for r in server.requests} == {"Bearer s3cret"}


def test_a_remote_host_chosen_by_the_study_needs_confirmation_even_without_a_key(
    tmp_path: Path,
) -> None:
    study = _study(tmp_path, {"base_url": "https://llm.example.org/v1"})
    refused = _biasim("run", str(study), "--out", str(tmp_path / "a"), env={})
    assert refused.returncode == 2
    assert "--allow-endpoint llm.example.org" in refused.stderr
    assert "Traceback" not in refused.stderr


def test_credentials_in_a_base_url_are_redacted_from_manifest_and_messages(
    tmp_path: Path, server: LoopbackLLMServer
) -> None:
    host = server.openai_base_url.split("//")[1].split("/")[0]
    # User-info can never work (the HTTP client refuses it beside the key header): refused.
    with_user = server.openai_base_url.replace("://", "://alice:pw-1234@")
    study = _study(tmp_path, {"base_url": with_user})
    refused = _biasim("run", str(study), "--out", str(tmp_path / "a"), env={})
    assert refused.returncode == 2 and "may not carry credentials" in refused.stderr
    assert "pw-1234" not in refused.stdout + refused.stderr and not (tmp_path / "a").exists()
    # A key in the query runs, and stays out of every file the run writes.
    study = _study(tmp_path, {"base_url": server.openai_base_url + "?api-key=qk-5678"})
    out = tmp_path / "run"
    done = _biasim("run", str(study), "--out", str(out), "--allow-endpoint", host, env={})
    assert done.returncode == 0, done.stderr
    manifest = (out / "manifest.json").read_text()
    assert "api-key=***" in manifest
    for path in (p for p in out.rglob("*") if p.is_file()):
        data = path.read_bytes()
        assert b"qk-5678" not in data, path.name
    assert "qk-5678" not in done.stdout + done.stderr


def test_redaction_helpers() -> None:
    assert redact_url("http://u:p@h:8/v1?api-key=k&x=1") == "http://***@h:8/v1?api-key=***&x=***"
    assert redact_url("https://api.openai.com/v1") == "https://api.openai.com/v1"
    assert redact_text("failed: https://u:secret@host/v1 (refused)") == (
        "failed: https://***@host/v1 (refused)"
    )
