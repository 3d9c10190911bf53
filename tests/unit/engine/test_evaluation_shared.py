"""What a reading's template sees of the design levels its documents' authors share."""

from __future__ import annotations

from biasim.agents.documents import Document, Evaluation
from biasim.personas import Persona
from biasim.simulator.engine.matching import show
from biasim.simulator.study.design import AgentSpec


def _author(i: int, levels: tuple[tuple[str, str], ...]) -> AgentSpec:
    return AgentSpec(
        agent_id=f"a{i}",
        condition="c",
        levels=levels,
        variables=tuple((f"var_{k}", v.upper()) for k, v in levels),
        model_label="",
        persona=Persona(key="p", attributes=(("race", "A"),), description=""),
        index=i,
        replicate=0,
        slot=f"p/{i}/r0",
    )


def _evaluation(*levels: tuple[tuple[str, str], ...]) -> Evaluation:
    shown = tuple(show(Document(_author(i, lv), f"u{i}", "text")) for i, lv in enumerate(levels))
    return Evaluation(id="e", shown=shown, cluster="e", k=1)


def test_shared_keeps_only_what_every_author_has() -> None:
    job_a, job_b = (("job", "nurse"), ("city", "x")), (("job", "nurse"), ("city", "y"))
    assert _evaluation(job_a, job_a).shared("levels") == {"job": "nurse", "city": "x"}
    assert _evaluation(job_a, job_b, job_a).shared("levels") == {"job": "nurse"}
    assert _evaluation(job_a, job_b).shared("variables") == {"var_job": "NURSE"}
    assert _evaluation((), ()).shared("levels") == {}
    assert _evaluation(job_a, ()).shared("levels") == {}
    # A fresh dict each time: a template context built from it cannot change the authors'.
    evaluation = _evaluation(job_a, job_a)
    evaluation.shared("levels")["job"] = "pilot"
    assert evaluation.shared("levels")["job"] == "nurse"
