"""What an analysis kind is: a spec read from the study file, a check of that spec against the
study, a computation on the results table, and its renderings (console, HTML).

A kind glues the study configuration to the plain functions in ``analysis/``; those never see
the engine. Everything a kind returns is plain data: JSON-able summaries, DataFrames, figures.
"""

from __future__ import annotations

import re
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

# Re-exported: kinds and sections name their tables' and figures' files with it.
from biasim.simulator.common.result_tables import slug as slug
from biasim.simulator.common.tables import print_table
from biasim.simulator.study.analysis_spec import AnalysisSpec
from biasim.simulator.study.facts import StudyFacts

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure
    from rich.console import Console

    from biasim.analysis.stats.units import Tested
    from biasim.simulator.common.html import HtmlSection
    from biasim.simulator.study.config import StudyConfig


@dataclass(frozen=True)
class AnalysisContext:
    """What a computation may read besides the results and its spec.

    Attributes:
        study: The study that produced the results.
        name: This analysis's name (prefix of its tables and figures).
        data_dir: Where relative data paths in the spec resolve (the study file's folder).
        models: Model labels in the order reports show them (the study's, or the user's in
            ``biasim compare``).
        out_dir: The run (or comparison) directory the outputs go to; kinds keep caches of
            costly measurements there (text scores). None when nothing is written.
        power_only: One simulated study of ``biasim power``: only what ``power_tests`` reads
            is needed, and a kind may skip the rest (models, breakdowns, exclusion bounds).
    """

    study: StudyConfig
    name: str
    data_dir: Path | None = None
    models: tuple[str, ...] = ()
    out_dir: Path | None = None
    power_only: bool = False

    def resolve(self, path: str) -> Path:
        """A data path from the spec: relative to the study file when it exists there."""
        return resolve_data_path(path, self.data_dir)

    def models_in(self, results: pd.DataFrame) -> list[str]:
        """Model labels present in ``results``, in report order."""
        present = list(results["model_label"].unique()) if len(results) else []
        ordered = [m for m in self.models if m in present]
        return ordered + [m for m in present if m not in ordered]


def resolve_data_path(path: str, folder: Path | None) -> Path:
    """``path`` in ``folder`` (the study file's) when it is relative and exists there, else
    ``path`` as given."""
    candidate = Path(path)
    if not candidate.is_absolute() and folder is not None:
        local = folder / candidate
        if local.exists():
            return local
    return candidate


#: What a hub id looks like (``name`` or ``owner/name``); anything else is a path.
_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[\w.-]+)?")
#: Kinds of model an option may expect: the architecture suffix in config.json, and a label
#: one of the model's labels must contain (NLI models label their entailment class).
MODEL_KINDS: dict[str, tuple[str, str | None]] = {
    "a masked LM": ("ForMaskedLM", None),
    "a text classifier": ("ForSequenceClassification", None),
    "an NLI cross-encoder": ("ForSequenceClassification", "entail"),
}


def model_problem(
    value: str, folder: Path | None, how_to: str, expects: str | None = None
) -> str | None:
    """Why ``value`` names no usable model (None when it does, or is a hub id, which only
    loading can check offline); the reason ends with ``how_to``.

    A local folder must hold a ``config.json``; with ``expects`` (a key of
    :data:`MODEL_KINDS`, e.g. ``"a text classifier"``) its architecture and labels must be that
    kind's, so an MLM given where a classifier is needed is refused before anything is scored.
    """
    path = resolve_data_path(value, folder).expanduser()
    if not path.exists():
        if value.startswith((".", "/", "~")) or not _HUB_ID.fullmatch(value):
            return f"no such folder `{value}`; {how_to}"
        return None
    config = path / "config.json"
    if not config.is_file():
        return f"`{value}` is not a model folder (no config.json); {how_to}"
    if expects is None:
        return None
    import json

    suffix, label = MODEL_KINDS[expects]
    try:
        settings = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        return f"`{value}`: cannot read config.json ({exc}); {how_to}"
    found = settings.get("architectures") or []
    if not any(str(a).endswith(suffix) for a in found):
        what = ", ".join(map(str, found)) or "model of unknown architecture"
        return f"`{value}` is a {what}, not {expects}; {how_to}"
    labels = [str(v).lower() for v in (settings.get("id2label") or {}).values()]
    if label and not any(label in v for v in labels):
        return (
            f"`{value}` has no `{label}…` label (labels: {', '.join(labels)}), not "
            f"{expects}; {how_to}"
        )
    return None


def without_model(rows: pd.DataFrame, id_col: str) -> pd.Series:
    """Ids (``agent_id`` or ``unit_id``) without their model prefix: the same prompt answered
    by each model (ids are ``model/condition/slot``), for matching answers across models."""
    model = rows["model_label"].astype(str)
    ids = rows[id_col].astype(str)
    stripped = ids.copy()
    stripped[:] = [
        i[len(m) + 1 :] if m and i.startswith(m + "/") else i
        for i, m in zip(ids, model, strict=True)
    ]
    return stripped


def summary_table(description: str, **row: Any) -> dict[str, Any]:
    """The JSON Schema of a table in a summary (a list of rows, each an object of column ->
    value; ``row`` adds schema keywords for each row, e.g. ``required``), for
    :meth:`AnalysisKind.summary_schema`."""
    return {"type": "array", "items": {"type": "object", **row}, "description": description}


@dataclass
class Section:
    """What one analysis produced.

    Attributes:
        summary: JSON-able results; :meth:`entry` adds ``kind`` and ``name``. Consoles and
            HTML pages render from it, so the numbers they show are the numbers in summary.json.
        tables: Table name (file stem) -> table.
        figures: Figure name (file stem) -> figure.
    """

    summary: dict[str, Any]
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    figures: dict[str, Figure] = field(default_factory=dict)

    def entry(self, kind: str, name: str) -> dict[str, Any]:
        """The analysis as summary.json's ``analyses`` holds it; ``analyze prism --json``
        prints the same, so the two cannot drift apart."""
        return {"kind": kind, "name": name, **self.summary}


def spec_kind(spec: type[AnalysisSpec]) -> str | None:
    """The one value a spec's ``kind`` admits (``kind: Literal["pipeline"]``), else None."""
    annotation = spec.model_fields["kind"].annotation
    admitted = typing.get_args(annotation)
    return admitted[0] if typing.get_origin(annotation) is Literal and len(admitted) == 1 else None


class AnalysisKind:
    """Base of every analysis kind. A subclass names its spec and result in its class line,
    ``class LengthKind(AnalysisKind, spec=LengthSpec, result=LengthResult)``, sets ``title`` and
    overrides :meth:`compute`; the other hooks have working defaults.

    Register a kind with :func:`simulator.kinds.register_kind` or the ``biasim.analyses``
    entry-point group; nothing central changes.
    """

    #: The value of ``kind:`` in the study file: the one value of the spec's ``kind: Literal``
    #: (see :meth:`__init_subclass__`), so the study file and the kind cannot name it apart.
    name: ClassVar[str]
    #: The pydantic model of this kind's entry in ``analyses:``.
    spec: ClassVar[type[AnalysisSpec]]
    #: A heading for reports.
    title: ClassVar[str] = "Analysis"
    #: The dataclass of the result :meth:`compute` returns (fields declared with
    #: ``common.results.value`` and ``table``), when the kind declares one: the console, the
    #: page and the summary's JSON Schema are then drawn from it, the kind adding its
    #: sentences (:meth:`headline`, :meth:`lines`) and figures (:meth:`figures`).
    result: ClassVar[type | None] = None

    def __init_subclass__(
        cls, *, spec: type[AnalysisSpec] | None = None, result: type | None = None, **kwargs: Any
    ) -> None:
        """Take ``spec`` and ``result`` from the class line, and the name from the spec.

        Raises:
            TypeError: The class sets a ``name`` its spec's ``kind`` does not admit.
        """
        super().__init_subclass__(**kwargs)
        if spec is not None:
            cls.spec = spec
        if result is not None:
            cls.result = result
        if "spec" not in vars(cls):
            return  # a base for kinds (DecisionsKind) or a variant of one: it keeps what it has
        named = spec_kind(cls.spec)
        if "name" not in vars(cls):
            if named is None:
                raise TypeError(
                    f"{cls.__qualname__}: its spec's `kind` is not one Literal value; "
                    'write `kind: Literal["<name>"]` in the spec, or set `name`'
                )
            cls.name = named
        elif named is not None and cls.name != named:
            raise TypeError(
                f"{cls.__qualname__}: name {cls.name!r} but its spec admits kind {named!r}; "
                "drop `name`: the spec's Literal names the kind"
            )

    def check(self, spec: Any, facts: StudyFacts) -> None:
        """Report what the spec names that the study lacks (stages, fields, axes, columns).

        Called before any model call; report through ``facts``, never raise.
        """

    def reads_counterfactual_sets(self, spec: Any) -> bool:
        """Whether this analysis counts a counterfactual stage's sets rightly (pairs its twins,
        or never reads them). Default False: a kind that counts each row as its own unit would
        count an agent's twins as independent people, so validate refuses it over such a stage."""
        return False

    def notes(self, spec: Any, data_dir: Path | None) -> list[str]:
        """What ``biasim validate`` says about the spec beyond its problems, e.g. where data
        it reads comes from (default: nothing). Called after a successful check."""
        return []

    def compute(self, results: pd.DataFrame, spec: Any, ctx: AnalysisContext) -> Section:
        """The analysis of ``results`` (every row of the run, every model).

        When ``results`` holds several models, a kind adds its cross-model tables, figures and
        tests here, so one multi-model run and ``biasim compare`` of single runs agree.
        """
        raise NotImplementedError

    def headline(self, summary: dict[str, Any]) -> str:
        """What the analysis measures, after its name on the console (a declared result)."""
        return f"({self.name})"

    def lines(self, summary: dict[str, Any]) -> list[str]:
        """The sentences of a declared result: said before its tables, on the console and as
        the page's paragraphs alike (default: none)."""
        return []

    def figures(self, summary: dict[str, Any]) -> list[tuple[str, str]]:
        """The figures of a declared result in the page, as (name, caption)."""
        return []

    def print(self, summary: dict[str, Any], console: Console) -> None:
        """Print the summary (a declared result: its sentences, then its tables; else its
        scalars, then each list of records as a table)."""
        from rich.table import Table
        from rich.text import Text

        from biasim.simulator.common.html import fmt, number_spec
        from biasim.simulator.common.results import print_result

        if self.result is not None:
            head = self.headline(summary)
            print_result(self.result, summary, console, head, self.lines(summary))
            return
        scalars = {
            k: v
            for k, v in summary.items()
            if isinstance(v, int | float | str) and k not in ("kind", "name")
        }
        console.print(
            Text(str(summary.get("name")), style="bold") + f" ({self.name}) {scalars or ''}"
        )
        for key, value in summary.items():
            if isinstance(value, list) and value and isinstance(value[0], dict):
                table = Table(title=f"{summary.get('name')}: {key}")
                for column in value[0]:
                    table.add_column(str(column), justify="right")
                for row in value:
                    table.add_row(
                        *[
                            fmt(v, number_spec(k)) if isinstance(v, float) else str(v)
                            for k, v in row.items()
                        ]
                    )
                print_table(console, table)

    def html(self, summary: dict[str, Any], section: HtmlSection) -> None:
        """Write the summary into the report page (a declared result: its sentences, tables
        and figures; else every list of records as a table)."""
        from biasim.simulator.common.results import html_result

        if self.result is not None:
            lines, figures = self.lines(summary), self.figures(summary)
            html_result(self.result, summary, section, lines, figures)
            return
        for key, value in summary.items():
            if isinstance(value, list) and value and isinstance(value[0], dict):
                section.table(value, key=key, title=key.replace("_", " "))

    @classmethod
    def summary_schema(cls) -> dict[str, Any]:
        """This kind's part of ``summary.json``'s JSON Schema: what its entry in ``analyses``
        holds besides ``kind`` and ``name`` (which every entry has). The default accepts any
        object; a kind that declares its fields here gets them checked wherever a summary is
        validated and listed in ``docs/reference/summary.md``. A kind that declares its
        :attr:`result` has it drawn from that."""
        if cls.result is not None:
            from biasim.simulator.common.results import result_schema

            return result_schema(cls.result)
        return {"type": "object"}

    def power_tests(self, summary: dict[str, Any]) -> dict[str, Tested]:
        """The tests a reviewer reads first, as ``name -> Tested`` (the p-value and the unit
        the test's null reshuffled, both from the row the test wrote), for ``biasim power``
        (default: none). Adjusted p-values where the kind adjusts."""
        return {}

    @classmethod
    def has_power_tests(cls) -> bool:
        """Whether the kind names any test for ``biasim power`` (it overrides
        :meth:`power_tests`): a study whose analyses name none is refused before it runs."""
        return cls.power_tests is not AnalysisKind.power_tests

    def power_no_effect(self, spec: Any, config: Any) -> set[str]:
        """Names of ``power_tests`` whose effect the study's synthetic truth cannot produce
        (e.g. a policy that changes only text the test double does not read), for ``biasim
        power`` to say "no effect declared" rather than print a power (default: none)."""
        return set()

    def audit_strata(self, spec: Any) -> list[str]:
        """Columns an audit of this analysis's decisions splits by (its conditions and cases:
        pooling scenarios or persona conditions into one selection rate means nothing)."""
        return []

    def selections(
        self, results: pd.DataFrame, spec: Any, ctx: AnalysisContext
    ) -> pd.DataFrame | None:
        """One row per decision for an audit (``model_label``, persona axes, ``selected``
        True/False/NA for excluded answers), or None when the kind decides nothing."""
        return None

    def stage_selections(
        self, results: pd.DataFrame, spec: Any, ctx: AnalysisContext, stage: str
    ) -> pd.DataFrame | None:
        """As :meth:`selections`, for the decisions of one stage of a pipeline (``biasim audit
        --stage``), or None when the kind has no stages to choose from."""
        return None
