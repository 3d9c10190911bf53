"""The JSON Schema of ``summary.json`` (draft 2020-12), versioned by
:data:`~biasim.simulator.common.rundir.SUMMARY_SCHEMA_VERSION`, which every writer stamps.

The fields every summary may hold are declared here, next to what each means; each analysis
kind declares its own entry of ``analyses`` (``AnalysisKind.summary_schema``), so a new kind plugs
in. A field a route writes without declaring it here fails validation (the top level admits no
other), and the tests validate the summary of every built-in study.

``python -m biasim.simulator.report.schema`` prints the schema; the docs' copy
(``docs/reference/summary.schema.json``) and its page (``summary.md``) are written by
``python -m biasim.simulator.cli.reference_docs``.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from biasim.simulator.common.rundir import SUMMARY_SCHEMA_VERSION
from biasim.simulator.kinds import get_kind, kind_names
from biasim.simulator.kinds.base import summary_table

DRAFT = "https://json-schema.org/draft/2020-12/schema"


_COUNT = {"type": "integer", "minimum": 0}
_TEXT = {"type": "string"}
_TEXTS = {"type": "array", "items": _TEXT}
_SCALAR = {"type": ["string", "number", "boolean", "null"]}

#: Field -> its schema and what it means; ``_REQUIRED`` are in every summary.
FIELDS: dict[str, dict[str, Any]] = {
    "schema_version": {
        "const": SUMMARY_SCHEMA_VERSION,
        "description": "Version of this schema the file follows.",
    },
    "study": {**_TEXT, "description": "The study's `name`."},
    "synthetic": {
        "type": "boolean",
        "description": "Whether any answer came from the synthetic responder (a test double, "
        "not a language model).",
    },
    "units": {
        **_COUNT,
        "description": "Units of work: rows of the results table, an agent's counterfactual set "
        "(its call and its twins') counted once, as validate and the progress count them.",
    },
    "status_counts": {
        "type": "object",
        "additionalProperties": _COUNT,
        "description": "Units per status (`answered`, `invalid`, `error`, `skipped`).",
    },
    "truncated": {**_COUNT, "description": "Answers cut at `max_tokens`."},
    "outside_choices": {
        **_COUNT,
        "description": "Answers kept but excluded because they chose none of a stage's choices.",
    },
    "policy_applicants": {
        **_COUNT,
        "description": "Letters of applicants a market's policy (or switched-off) trajectories "
        "drew and its base did not: kept in results.parquet and read by those trajectories; the "
        "analyses, of the base, leave them out.",
    },
    "models": {**_TEXTS, "description": "Every `backend:model` that answered, sorted."},
    "model_labels": {**_TEXTS, "description": "Model labels in report order."},
    "model_of_label": {
        "type": "object",
        "additionalProperties": _TEXT,
        "description": "Model label -> the `backend:model` it is.",
    },
    "outcomes_by_group": {
        "type": "object",
        "additionalProperties": summary_table("rows"),
        "description": "Persona axis -> unit outcomes (counts and rates per status) per value "
        "of the axis (and per model when there are several).",
    },
    "samples": {
        "type": "array",
        "items": {
            "type": "object",
            "required": ["stage", "model_label", "unit_id", "answer"],
            "properties": {
                "stage": _TEXT,
                "model_label": _TEXT,
                "axis": {"type": ["string", "null"]},
                "group": _SCALAR,
                "unit_id": _TEXT,
                "answer": _TEXT,
            },
        },
        "description": "A few answers per stage, model and group, as the report shows them "
        "(cut at 400 characters).",
    },
    "analyses": {
        "type": "array",
        "items": {"$ref": "#/$defs/analysis"},
        "description": "One entry per analysis of the study, in its order: `kind`, `name` and "
        "what the kind computed (see the kinds below); one that failed is in "
        "`failed_analyses` instead.",
    },
    "outputs": {**_TEXTS, "description": "Tables and figures written, relative to the folder."},
    "status": {
        "enum": ["complete", "interrupted", "failed"],
        "description": "How the run's last session ended.",
    },
    "message": {
        **_TEXT,
        "description": "Why it ended so; when complete, which analyses failed (empty when "
        "none did).",
    },
    "resume": {**_TEXT, "description": "The command that continues an unfinished run."},
    "traceback": {**_TEXT, "description": "The failure's traceback, when the session failed."},
    "accounting": {
        "type": "object",
        "description": "Calls, units, tokens, latency and cost per role and model (`by_role`), "
        "summed over every session.",
    },
    "calls": {
        "type": "object",
        "required": ["new", "from_cache"],
        "properties": {"new": _COUNT, "from_cache": _COUNT},
        "description": "Calls this session sent, and answers it read from the call store.",
    },
    "timings": {
        "type": "object",
        "properties": {
            "wall_s": {"type": "number"},
            "stages_s": {"type": "object", "additionalProperties": {"type": "number"}},
            "waves_s": {"type": "number"},
        },
        "description": "Seconds of this session: in all, per stage, and in scheduling waves.",
    },
    "units_expected": {
        **_COUNT,
        "description": "Units the design makes (a market with policies adds the letters of "
        "applicants only a policy drew, as the run draws them).",
    },
    "units_done": {**_COUNT, "description": "Units settled (answered, invalid, error, skipped)."},
    "units_from_cache": {**_COUNT, "description": "Units answered from the call store."},
    "skip_causes": {**_TEXT, "description": "What leaves a unit skipped in this study, in words."},
    "cost": {
        "type": "object",
        "required": ["total_usd", "by_role", "limit_usd"],
        "properties": {
            "total_usd": {"type": ["number", "null"]},
            "by_role": summary_table("rows"),
            "limit_usd": {"type": ["number", "null"]},
            "unconfirmed_usd": {"type": "number"},
        },
        "description": "US dollars billed (null where a price is unknown), per role and "
        "model, the study's `cost_limit`, and failed attempts it also counted.",
    },
    "analysis_error": {
        **_TEXT,
        "description": "Why the analyses are missing (`biasim analyze` redoes them).",
    },
    "failed_analyses": {
        "type": "array",
        "items": {
            "type": "object",
            "required": ["kind", "name", "error"],
            "properties": {"kind": _TEXT, "name": _TEXT, "error": _TEXT},
            "additionalProperties": False,
        },
        "description": "Analyses whose computation raised, each with its `kind`, `name` and "
        "the error's first line; the others are in `analyses` and written as usual (the "
        "command exits 1).",
    },
    "report_error": {**_TEXT, "description": "Why report.html could not be drawn."},
    "partial": {**_TEXT, "description": "A reanalysed run that is not complete, in words."},
    "edited": {**_TEXT, "description": "Tables edited after the run (accepted with a flag)."},
    "audits": {
        "type": "object",
        "additionalProperties": {"type": "object"},
        "description": "`biasim audit` results attached to the run, by the folder of their tables.",
    },
    "compared_runs": {
        "type": "array",
        "items": {
            "type": "object",
            "required": ["path", "labels"],
            "properties": {
                "path": _TEXT,
                "labels": {"type": "object", "additionalProperties": _TEXT},
                "status": {"type": ["string", "null"]},
            },
        },
        "description": "`biasim compare`: the runs compared, their model labels and status.",
    },
    "study_differences": {
        **_TEXTS,
        "description": "`biasim compare --force`: how the compared runs' studies differ.",
    },
    "written": {**_TEXT, "description": "`biasim compare`: when the comparison was written."},
}
_REQUIRED = ["schema_version"]


def _analysis() -> dict[str, Any]:
    """An entry of ``analyses``: ``kind`` and ``name``, then the part its kind declares."""
    return {
        "type": "object",
        "required": ["kind", "name"],
        "properties": {
            "kind": {**_TEXT, "description": "The analysis kind (`kind:` in the study)."},
            "name": {**_TEXT, "description": "The analysis's name (prefix of its tables)."},
        },
        "allOf": [
            {
                "if": {"properties": {"kind": {"const": name}}, "required": ["kind"]},
                "then": {"$ref": f"#/$defs/kind_{name}"},
            }
            for name in kind_names()
        ],
    }


def summary_schema() -> dict[str, Any]:
    """The JSON Schema of ``summary.json``, with every registered kind's part."""
    return {
        "$schema": DRAFT,
        "$id": f"urn:biasim:summary:{SUMMARY_SCHEMA_VERSION}",
        "title": "biasim summary.json",
        "description": "What a run (`biasim run`, `analyze`, `compare`, `audit`) found: its "
        "analyses, how it ended and what it cost.",
        "type": "object",
        "required": _REQUIRED,
        "properties": FIELDS,
        "additionalProperties": False,
        "$defs": {
            "analysis": _analysis(),
            **{f"kind_{name}": get_kind(name).summary_schema() for name in kind_names()},
        },
    }


def schema_text() -> str:
    """The schema as the docs keep it (``docs/reference/summary.schema.json``)."""
    return json.dumps(summary_schema(), indent=2) + "\n"


def _type(prop: dict[str, Any]) -> str:
    if "const" in prop:
        return f"`{prop['const']}`"
    if "enum" in prop:
        return " / ".join(f"`{v}`" for v in prop["enum"])
    if "$ref" in prop:
        return prop["$ref"].rsplit("/", 1)[-1]
    kind = prop.get("type", "any")
    if kind == "array":
        items = prop.get("items", {})
        return "table" if items.get("type") == "object" else f"list of {_type(items)}"
    if kind == "object" and isinstance(prop.get("additionalProperties"), dict):
        return f"map to {_type(prop['additionalProperties'])}"
    return " or ".join(kind) if isinstance(kind, list) else str(kind)


def _table(part: dict[str, Any]) -> list[str]:
    required = set(part.get("required", ()))
    lines = ["| field | type | always | what it is |", "|---|---|---|---|"]
    for name, prop in part.get("properties", {}).items():
        what = " ".join(prop.get("description", "").split()).replace("|", "\\|")
        flag = "yes" if name in required else ""
        lines.append(f"| `{name}` | {_type(prop)} | {flag} | {what} |")
    return lines


#: What the page says of a kind computed per run.
PER_RUN = (
    "With several models (or compared runs) these fields are under `models`: model label -> "
    "this object, with its `name` and `model`."
)


def summary_page() -> str:
    """``docs/reference/summary.md``: every field of ``summary.json`` from the schema."""
    schema = summary_schema()
    lines = [
        "# summary.json",
        "",
        "Every run folder (and every `biasim compare` folder) holds `summary.json`. "
        f"{schema['description']} Its shape is the JSON "
        f"Schema [summary.schema.json](summary.schema.json) (draft 2020-12, `$id` "
        f"`{schema['$id']}`); `schema_version` says which version a file follows, and "
        "`python -m biasim.simulator.report.schema` prints the schema of the installed "
        "version (with the kinds of any plug-in).",
        "",
        "```python",
        "import json",
        "from pathlib import Path",
        "",
        "import jsonschema",
        "",
        'summary = json.loads(Path("runs/x/summary.json").read_text())',
        'schema = json.loads(Path("summary.schema.json").read_text())',
        "jsonschema.Draft202012Validator(schema).validate(summary)",
        "```",
        "",
        "A field not listed here is not written: the schema admits no other at the top level. "
        "A field is absent when it does not apply (`resume` of a complete run, the analyses "
        "of a run that answered nothing).",
        "",
        "## Fields",
        "",
        *_table(schema),
        "",
        "## Analyses",
        "",
        "Each entry of `analyses` has `kind` and `name`; the rest is what its kind declares "
        "(`AnalysisKind.summary_schema`, see [Analysis kinds](../extending/kinds.md)). A kind "
        "that declares no fields accepts any object; the tables it writes are described on its "
        "study's page.",
        "",
    ]
    for name in kind_names():
        part = schema["$defs"][f"kind_{name}"]
        lines += [f"### `{name}`", ""]
        if "anyOf" in part:  # computed per run (sections/per_run.py)
            lines += [PER_RUN, ""]
            part = part["anyOf"][0]
        lines += _table(part) if part.get("properties") else ["Any object (not declared yet)."]
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def main() -> int:
    sys.stdout.write(schema_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
