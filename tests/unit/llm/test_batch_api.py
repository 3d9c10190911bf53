"""The batch protocols' parsing: outcomes per custom_id, and results read only from the role's
own server."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from biasim.simulator.llm.batch_api import AnthropicBatches, OpenAIBatches
from biasim.simulator.llm.errors import BackendError
from biasim.simulator.llm.types import LLMResponse


class FakeTransport:
    def __init__(self, answers: dict[str, Any]) -> None:
        self.answers = answers
        self.paths: list[str] = []

    async def get(self, server: int, path: str) -> bytes:
        self.paths.append(path)
        value = self.answers[path]
        if isinstance(value, list):
            return b"\n".join(orjson.dumps(line) for line in value)
        return orjson.dumps(value)


def _answer(raw: bytes) -> LLMResponse:
    return LLMResponse(text=orjson.loads(raw)["text"])


def test_openai_reads_the_output_and_error_files_of_an_expired_batch() -> None:
    transport = FakeTransport(
        {
            "/batches/b1": {"status": "expired", "output_file_id": "f1", "error_file_id": "f2"},
            "/files/f1/content": [
                {"custom_id": "a", "response": {"status_code": 200, "body": {"text": "yes"}}}
            ],
            "/files/f2/content": [
                {
                    "custom_id": "b",
                    "response": None,
                    "error": {"code": "batch_expired", "message": "late"},
                },
                {
                    "custom_id": "c",
                    "response": {"status_code": 500, "body": {"error": {"message": "boom"}}},
                },
            ],
        }
    )
    state = asyncio.run(OpenAIBatches(transport, dict, _answer).poll("b1"))  # type: ignore[arg-type]
    assert state.ended and state.status == "expired"
    assert state.results["a"].text == "yes"  # type: ignore[union-attr]
    assert "batch_expired" in state.results["b"] and "boom" in state.results["c"]  # type: ignore[operator]


def test_a_pending_openai_batch_reads_no_file() -> None:
    transport = FakeTransport({"/batches/b1": {"status": "in_progress"}})
    state = asyncio.run(OpenAIBatches(transport, dict, _answer).poll("b1"))  # type: ignore[arg-type]
    assert not state.ended and not state.results and transport.paths == ["/batches/b1"]


def test_anthropic_results_are_read_from_the_roles_server_only() -> None:
    ended = {"processing_status": "ended", "results_url": "https://evil.example/x/results"}
    transport = FakeTransport({"/v1/messages/batches/m1": ended})
    api = AnthropicBatches(transport, "https://api.anthropic.com", dict, _answer)  # type: ignore[arg-type]
    with pytest.raises(BackendError, match="another server"):
        asyncio.run(api.poll("m1"))


def test_anthropic_outcomes_by_result_type() -> None:
    url = "https://api.anthropic.com/v1/messages/batches/m1/results"
    transport = FakeTransport(
        {
            "/v1/messages/batches/m1": {"processing_status": "ended", "results_url": url},
            "/v1/messages/batches/m1/results": [
                {"custom_id": "a", "result": {"type": "succeeded", "message": {"text": "ok"}}},
                {"custom_id": "b", "result": {"type": "expired"}},
                {
                    "custom_id": "c",
                    "result": {"type": "errored", "error": {"error": {"message": "bad"}}},
                },
            ],
        }
    )
    api = AnthropicBatches(transport, "https://api.anthropic.com", dict, _answer)  # type: ignore[arg-type]
    state = asyncio.run(api.poll("m1"))
    assert state.results["a"].text == "ok"  # type: ignore[union-attr]
    assert state.results["b"] == "batch request expired"
    assert state.results["c"] == "batch request errored: bad"
