"""Kind ``acceptance``: acceptance-rate disparities of written decisions (seed 001). Each text
is labelled accept / reject / invalid with the applicant's name redacted (rules, an SVM or an
LLM judge), then rates, impact ratios and permutation tests per group and model, the paper's
breakdown tables, and, with several models, the models side by side with tests of their
differences. One declared result (:class:`AcceptanceResult`, a part per model) gives the
summary, its schema, the console and the page."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import partial
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from biasim.simulator.common.html import fmt, format_p
from biasim.simulator.common.lazy import lazy_module
from biasim.simulator.common.result_tables import Records, missing
from biasim.simulator.common.results import about, summary_of, tabled
from biasim.simulator.kinds.base import AnalysisKind, AnalysisSpec, Section, slug
from biasim.simulator.kinds.lazy import columns, figures, pd, refusals, unit_stats
from biasim.simulator.kinds.sections import unit_models
from biasim.simulator.kinds.sections.codebook import tables_of
from biasim.simulator.kinds.sections.differences import MODEL_DIFFERENCES, model_differences
from biasim.simulator.kinds.sections.exclusions import EXCLUSIONS
from biasim.simulator.kinds.sections.expected import (
    ExpectedDecisions,
    add_expected_decisions,
    is_logprob_stage,
)

if TYPE_CHECKING:
    from biasim.analysis.stats.units import Tested
    from biasim.simulator.kinds.base import AnalysisContext, StudyFacts

disparity = lazy_module("biasim.analysis.stats.disparity")


class AcceptanceSpec(AnalysisSpec):
    """Acceptance-rate disparities of written decisions (seed 001): classify, then test."""

    kind: Literal["acceptance"]
    stage: str = Field(description="Stage whose text is a decision (e.g. the hiring email).")
    field: str = Field("text", description="Field holding the text (free-text stages: `text`).")
    classifier: Literal["rules", "svm", "judge"] = "rules"
    judge_stage: str | None = Field(
        None, description="For classifier `judge`: the stage whose `outcome` field labels texts."
    )
    training_csv: str | None = Field(
        None,
        description="For classifier `svm`: labelled CSV (`text,label`); starter set if absent.",
    )
    labelled: str | None = Field(
        None,
        description="Hand labels of this run's emails for the paper's Table 5 (validity, and "
        "the classifier's precision / recall / F1 on accept and reject): the run's "
        "`<name>_annotation_sample.csv` with its `label` column filled (accept / reject / "
        "invalid).",
    )
    groups: list[str] = Field(min_length=1, description="Persona axes defining groups.")
    unit: Literal["email", "name"] = Field(
        "name", description="Exchangeable unit of the permutation test."
    )

    @property
    def unit_column(self) -> str | None:
        """The column whose values every test of the kind relabels whole (the name), or None
        when each email is its own unit: derived here once, read by every test and bound."""
        return "persona_name" if self.unit == "name" else None

    strata: str | None = Field(None, description="Factor tested separately, then combined.")
    breakdowns: list[str] = Field(
        default_factory=list, description="Columns giving one rate table each (Tables 1-4)."
    )
    breakdown_notes: dict[str, str] = Field(
        default_factory=dict,
        description="A note printed with a breakdown's table (key: a `breakdowns` column), e.g. "
        "how its rows differ from a paper's; with `strata` the note also counts the strata "
        "values in each row of this run.",
    )
    subset: str | None = Field(
        None,
        description="Column marking a subset of rows (true / yes / 1), e.g. `subset7`: adds "
        "Table 1 of seed 001, one row for the subset and one for all rows, with marks from the "
        "joint test within each and, beside them, from the paper's test (per-stratum "
        "email-level tests combined by Fisher's method).",
    )
    reference: list[str] | None = Field(
        None,
        description="Group values (one per `groups` axis), e.g. [White, male]: also test every "
        "other group against this one, not only against the population.",
    )
    n_permutations: int = Field(5000, ge=100)
    adjust: Literal["holm", "bh", "none"] = "holm"


_DIFFERENCES = replace(
    MODEL_DIFFERENCES,
    title="Differences between models",
    note="p = permutation test of |DPD A - DPD B| (max - min acceptance rate over the groups): "
    "model labels are swapped within each prompt (same template, name and seed) under the null "
    "that both models answer each prompt alike; p adj. over the model pairs (* = significant).",
)

#: Table 1's column suffix of the paper's test's marks, after a group's label.
PAPERS_MARK = " sig (paper's test)"

TABLES = tables_of(__name__)


@dataclass(kw_only=True)
class ModelAcceptance:
    """One model's acceptance rates, impact ratios and tests."""

    n_valid: int = field(metadata=about("Valid answers."))
    n_excluded: int = field(metadata=about("Invalid answers (excluded)."))
    population_rate: float | None = field(
        default=None, metadata=about("Accepted / valid answers, every group.")
    )
    dpd: float | None = field(default=None, metadata=about("Max - min acceptance rate."))
    dpd_p_value: float | None = field(default=None, metadata=about("The parity test's p."))
    dpd_threshold: float | None = field(
        default=None, metadata=about("The DPD at which the parity test rejects.")
    )
    dpd_test: str | None = field(default=None, metadata=about("The parity test's null."))
    test_unit: str | None = field(default=None, metadata=about("What every test relabels."))
    test_units: int | None = field(default=None, metadata=about("How many of them answered."))
    flag_chance_unit: str | None = field(
        default=None, metadata=about("What the four-fifths flag chances resample.")
    )
    flag_chance_basis: str = field(metadata=about("The same, in words."))
    p_any_flag_by_chance: float | None = field(
        default=None, metadata=about("Chance that an unbiased model flags some group.")
    )
    min_ratio_p05: float | None = field(
        default=None, metadata=about("5th percentile of the lowest impact ratio by chance.")
    )
    test: Literal["joint", "pooled"] = field(
        metadata=about("The headline test: joint across strata, or pooled.")
    )
    test_name: str = field(metadata=about("The headline test, in words."))
    test_table: str = field(metadata=about("Its CSV table, after the model's name."))
    reference_group: str | None = field(
        default=None, metadata=about("The group the reference table compares with.")
    )
    notes: list[str] = field(metadata=about("What each test assumes; the breakdowns' notes."))
    rates: Records = field(metadata=tabled(TABLES["rates"]))
    impact_ratios: Records = field(metadata=tabled(TABLES["impact_ratios"]))
    permutation: Records | None = field(default=None, metadata=tabled(TABLES["permutation"]))
    reference: Records | None = field(default=None, metadata=tabled(TABLES["reference"]))
    table1: Records | None = field(default=None, metadata=tabled(TABLES["table1"]))


@dataclass(kw_only=True)
class AcceptanceResult:
    """What ``acceptance`` computes; the summary, its schema and the renderings come from it."""

    stage: str = field(metadata=about("The stage whose emails are read."))
    classifier: str = field(metadata=about("How outcomes are labelled."))
    groups: list[str] = field(metadata=about("Persona columns compared."))
    adjust: str = field(metadata=about("Adjustment of the tests."))
    judge_rules_agreement: float | None = field(
        default=None, metadata=about("Share of emails the judge and the rules label alike.")
    )
    judge_rules_kappa: float | None = field(
        default=None, metadata=about("Cohen's kappa of the same.")
    )
    expected: ExpectedDecisions | None = field(
        default=None, metadata=about("Expected acceptance (judge answering with logprobs).")
    )
    models: dict[str, ModelAcceptance] = field(
        metadata=about(
            "Model label -> acceptance rates, impact ratios, the DPD and its test with the unit "
            "it relabels."
        )
    )
    table5: Records | None = field(default=None, metadata=tabled(TABLES["table5"]))
    exclusions: Records | None = field(default=None, metadata=tabled(EXCLUSIONS))
    model_estimates: Records | None = field(
        default=None, metadata=tabled(unit_models.MODEL_ESTIMATES)
    )
    model_estimates_item: str | None = field(
        default=None, metadata=about("The crossed item of the model fits (the stratum).")
    )
    model_grades: Records | None = field(
        default=None, metadata=tabled(unit_models.TABLES["model_grades"])
    )
    grade_figures: list[str] = field(
        default_factory=list, metadata=about("Model-grade figures, one per contrast.")
    )
    model_order: list[str] | None = field(
        default=None, metadata=about("The models compared, in order.")
    )
    model_differences: Records | None = field(default=None, metadata=tabled(_DIFFERENCES))


def _table1_records(table1: pd.DataFrame) -> Records:
    """Table 1 as records, one per row and group: the rate and both tests' marks."""
    labels = [c[: -len(" sig")] for c in table1.columns if c.endswith(" sig")]
    out = []
    for row in table1.to_dict("records"):
        for label in labels:
            marks = {"calibrated": row[f"{label} sig"]}
            if label + PAPERS_MARK in row:
                marks["papers_test"] = row[label + PAPERS_MARK]
            out.append(
                {
                    "rows": row["rows"],
                    "group": label,
                    "rate": row[label],
                    **marks,
                    "average": row["average"],
                    "n": row["n"],
                }
            )
    return out


def _scalar(value: Any) -> Any:
    """A report's number as the summary holds it: None where missing (NaN)."""
    return None if missing(value) else value


def _breakdown_note(part: pd.DataFrame, spec: AcceptanceSpec, column: str) -> str:
    """The study's note on the table by ``column``, with (``strata`` set) how many strata
    values each of its rows holds in this run: the counts a reader compares with a paper's."""
    note = f"Table by {column}: {spec.breakdown_notes[column]}"
    if spec.strata is None or spec.strata == column:
        return note
    counts = part.dropna(subset=[column]).groupby(column, sort=False)[spec.strata].nunique()
    listed = ", ".join(f"{level} {n}" for level, n in counts.items())
    return f"{note} {spec.strata} values per row in this run: {listed}."


def _test_name(test: str) -> str:
    """The headline test of each group, in words."""
    if test == "joint":
        return (
            "joint permutation test across strata (each name relabelled once for every stratum; "
            "d = excess over the rate its strata give)"
        )
    return "permutation test of the group against the population"


class AcceptanceKind(AnalysisKind, spec=AcceptanceSpec, result=AcceptanceResult):
    """Acceptance rates of hiring-decision emails by group (seed 001)."""

    title = "Acceptance rates of written decisions"

    def check(self, spec: AcceptanceSpec, facts: StudyFacts) -> None:
        facts.need_field(spec.stage, spec.field, ("field",), ("stage",))
        facts.need_axes(spec.groups, ("groups",))
        if spec.classifier == "judge":
            if spec.judge_stage is None:
                facts.problem(("judge_stage",), "the judge classifier needs `judge_stage`")
            else:
                facts.need_field(spec.judge_stage, "outcome", ("judge_stage",), ("judge_stage",))
        facts.need_column(spec.strata, ("strata",))
        facts.need_column(spec.subset, ("subset",))
        if spec.reference is not None and len(spec.reference) != len(spec.groups):
            facts.problem(
                ("reference",),
                f"give one value per group axis ({', '.join(spec.groups)}), e.g. "
                f"{[values[0] for values in facts.axes.values()][: len(spec.groups)]}",
            )
        elif spec.reference is not None:
            for axis, value in zip(spec.groups, spec.reference, strict=True):
                known = facts.axes.get(axis)
                if known is not None and value not in known:
                    facts.problem(
                        ("reference",), f"`{value}` is not a value of `{axis}` ({', '.join(known)})"
                    )
        for j, name in enumerate(spec.breakdowns):
            facts.need_column(name, ("breakdowns", j))
        for name in spec.breakdown_notes:
            if name not in spec.breakdowns:
                facts.problem(
                    ("breakdown_notes", name),
                    f"`{name}` is not one of `breakdowns` ({', '.join(spec.breakdowns) or 'none'})",
                )

    def outcomes(self, results: pd.DataFrame, spec: AcceptanceSpec, ctx: AnalysisContext):
        """The decision stage's rows with ``outcome`` (accept / reject / invalid), the texts
        redacted, and the rules' labels of the same texts (for the judge's agreement)."""
        from biasim.families.hiring_emails.stats import (
            email_outcomes,  # scikit-learn: imported only by this kind
        )

        rows = results[(results["stage"] == spec.stage)].reset_index(drop=True)
        texts = rows[spec.field].fillna("").astype(str).tolist()
        names = rows["persona_name"].fillna("").astype(str).tolist()
        redacted = email_outcomes.redact_names(texts, names)
        if spec.classifier == "rules":
            labels = email_outcomes.RuleClassifier().predict(redacted)
        elif spec.classifier == "svm":
            training = (
                ctx.resolve(spec.training_csv)
                if spec.training_csv
                else email_outcomes.STARTER_LABELS
            )
            labels = email_outcomes.SvmClassifier.from_csv(training).predict(redacted)
        else:
            judged = results[results["stage"] == spec.judge_stage].set_index("agent_id")
            labels = rows["agent_id"].map(judged["outcome"]).fillna("invalid").tolist()
        rows = rows.assign(outcome=labels)
        rows.loc[~rows["valid"].astype(bool), "outcome"] = "invalid"
        return rows, redacted

    def compute(self, results: pd.DataFrame, spec: AcceptanceSpec, ctx: AnalysisContext) -> Section:
        from biasim.families.hiring_emails.stats import email_outcomes

        name = ctx.name
        rows, redacted = self.outcomes(results, spec, ctx)
        section = Section(summary={})
        result = AcceptanceResult(
            stage=spec.stage,
            classifier=spec.classifier,
            groups=list(spec.groups),
            adjust=spec.adjust,
            models={},
        )
        if spec.classifier == "judge" and len(rows):
            # A reviewer's first question about an LLM judge: does it agree with the transparent
            # rules on the same (redacted) emails, and where not.
            rules = email_outcomes.RuleClassifier().predict(redacted)
            table, share, kappa = email_outcomes.label_agreement(rows["outcome"].tolist(), rules)
            section.tables[f"{name}_judge_vs_rules"] = table.rename(columns={"first": "judge"})
            result.judge_rules_agreement = _scalar(share)
            result.judge_rules_kappa = _scalar(kappa)
        section.tables[f"{name}_outcomes"] = rows[
            ["unit_id", "model_label", *spec.groups, "persona_name", "outcome"]
        ]
        if not ctx.power_only:
            self._validity_and_models(rows, spec, ctx, section, result)
            self._table5(rows, redacted, spec, ctx, section, result)
        if spec.classifier == "judge" and spec.judge_stage:
            result.expected = self._expected(results, spec, ctx, section)
        models = ctx.models_in(rows)
        for model in models:
            part = rows[rows["model_label"] == model]
            result.models[model] = self._model(part, model, spec, ctx, section)
        if len(models) > 1:
            self._across_models(rows, spec, ctx, models, section, result)
        section.summary = summary_of(result)
        # A model's tests that did not run are left out of its part, as the result's own fields
        # are (a nested part keeps its Nones, which its tables' schema would refuse).
        section.summary["models"] = {m: summary_of(p) for m, p in result.models.items()}
        return section

    @staticmethod
    def _table5(
        rows: pd.DataFrame,
        redacted: list[str],
        spec: AcceptanceSpec,
        ctx: AnalysisContext,
        section: Section,
        result: AcceptanceResult,
    ) -> None:
        """The emails to label by hand (30 per model and group) and, once labelled
        (``labelled``), the paper's Table 5: validity and the classifier's precision, recall
        and F1 against those labels."""
        from biasim.families.hiring_emails.stats import email_outcomes

        shown = rows.assign(text=redacted)[["unit_id", "model_label", *spec.groups, "text"]]
        section.tables[f"{ctx.name}_annotation_sample"] = email_outcomes.annotation_sample(
            shown, spec.groups, seed=ctx.study.seed
        )
        if spec.labelled is None:
            return
        labelled = email_outcomes.read_labelled_emails(ctx.resolve(spec.labelled))
        if "unit_id" not in labelled:
            raise ValueError(f"{spec.labelled}, line 1, column 'unit_id': missing from the header")
        table = email_outcomes.table5(rows[["unit_id", "model_label", "outcome"]], labelled)
        result.table5 = TABLES["table5"].write(section.tables, ctx.name, table)

    @staticmethod
    def _validity_and_models(
        rows: pd.DataFrame,
        spec: AcceptanceSpec,
        ctx: AnalysisContext,
        section: Section,
        result: AcceptanceResult,
    ) -> None:
        """Invalid answers by group, the unit-level models and the exclusion bounds: what a
        reader of the report weighs beside the tests (``biasim power`` reads none of it)."""
        from biasim.families.hiring_emails.stats import email_outcomes

        name = ctx.name
        validity, pairwise = email_outcomes.validity_by_group(
            rows,
            spec.groups,
            "outcome",
            unit_col=spec.unit_column,
            n_permutations=spec.n_permutations,
            seed=ctx.study.seed,
        )
        section.tables[f"{name}_validity"] = validity
        section.tables[f"{name}_validity_pairwise"] = pairwise
        unit_col = spec.unit_column
        labelled = rows.assign(
            _group=columns.join_columns(rows, spec.groups, ", "),
            _hit=rows["outcome"].map({"accept": True, "reject": False}).astype("boolean"),
        )
        # The name is the unit of the models whatever the tests' unit: its emails are not
        # independent (a model cannot take each email as its own cluster); the stratum (the
        # role) is the crossed item.
        estimates, grades = unit_models.add_model_estimates(
            section,
            ctx,
            labelled,
            fit_cols=["model_label"],
            group_col="_group",
            hit_col="_hit",
            unit_col=unit_col or "persona_name",
            item_col=spec.strata,
        )
        result.model_estimates = unit_models.MODEL_ESTIMATES.write(
            section.tables, ctx.name, estimates
        )
        result.model_estimates_item = spec.strata
        if grades is not None:
            result.model_grades = unit_models.TABLES["model_grades"].write(
                section.tables, ctx.name, grades
            )
            result.grade_figures = [n for n in section.figures if "_model_grades" in n]
        exclusions = refusals.case_exclusions(
            labelled,
            ["model_label"],
            "_group",
            "_hit",
            unit_col=unit_col,
            alpha=0.05,
            n_permutations=spec.n_permutations,
            seed=ctx.study.seed,
        )
        result.exclusions = EXCLUSIONS.write(section.tables, ctx.name, exclusions)

    def _expected(
        self, results: pd.DataFrame, spec: AcceptanceSpec, ctx: AnalysisContext, section: Section
    ) -> ExpectedDecisions | None:
        """A judge answering with log-probabilities: the expected acceptance of each group
        (mean probability the judge labels the email `accept`) and its DPD test."""
        if not is_logprob_stage(ctx, spec.judge_stage or "") or "probabilities" not in results:
            return None
        judged = results[results["stage"] == spec.judge_stage]
        groups = list(spec.groups)
        long = judged.assign(
            attribute="+".join(groups),
            value=columns.join_columns(judged, groups, "|"),
        )
        return add_expected_decisions(
            section.tables,
            ctx,
            long,
            target="accept",
            case_cols=["model_label", "attribute"],
            n_permutations=spec.n_permutations,
            unit_col=spec.unit_column,
        )

    def _model(
        self,
        part: pd.DataFrame,
        model: str,
        spec: AcceptanceSpec,
        ctx: AnalysisContext,
        section: Section,
    ) -> ModelAcceptance:
        seed = ctx.study.seed
        report = self._disparity(part, spec, seed, bounds=not ctx.power_only)
        prefix = slug(ctx.name, model)
        # With strata the headline test is the joint one: it relabels each name once for every
        # stratum; the pooled test ignores the strata.
        test_table = "joint" if "joint" in report else "permutation"
        declared = {"rates", "impact_ratios", "reference", test_table}
        for key, value in report.items():
            if isinstance(value, pd.DataFrame) and key not in declared:
                section.tables[f"{prefix}_{key}"] = value
        table1 = None
        if spec.subset and report["n_valid"] and not ctx.power_only:
            table1, table1_tests = self._table1(part, spec, seed, report.get("joint"))
            section.tables[f"{prefix}_table1"] = table1
            section.tables[f"{prefix}_table1_tests"] = table1_tests
        # Without a single valid answer there is nothing to break down (the report says so).
        if report["n_valid"] and not ctx.power_only:
            self._add_breakdowns(part, spec, seed, report, prefix, section)
        scalars = {
            key: _scalar(report.get(key))
            for key in (
                "population_rate",
                "dpd",
                "dpd_p_value",
                "dpd_threshold",
                "dpd_test",
                "test_unit",
                "test_units",
                "flag_chance_unit",
                "p_any_flag_by_chance",
                "min_ratio_p05",
            )
        }
        test = "joint" if test_table == "joint" else "pooled"
        named = {"key": model, "test_table": test_table}
        reference = report.get("reference")
        return ModelAcceptance(
            **scalars,
            n_valid=report["n_valid"],
            n_excluded=report["n_excluded"],
            flag_chance_basis=disparity.flag_chance_basis(report.get("flag_chance_unit")),
            test=test,
            test_name=_test_name(test),
            test_table=test_table,
            notes=list(report["notes"]),
            rates=TABLES["rates"].named(**named).write(section.tables, ctx.name, report["rates"]),
            impact_ratios=TABLES["impact_ratios"]
            .named(**named)
            .write(section.tables, ctx.name, report["impact_ratios"]),
            permutation=(
                TABLES["permutation"]
                .named(**named)
                .write(section.tables, ctx.name, report[test_table])
                if test_table in report
                else None
            ),
            reference_group=(
                str(reference["compared_with"].iloc[0])
                if reference is not None and len(reference)
                else None
            ),
            reference=(
                TABLES["reference"].named(**named).write(section.tables, ctx.name, reference)
                if reference is not None
                else None
            ),
            table1=_table1_records(table1) if table1 is not None else None,
        )

    @staticmethod
    def _disparity(
        part: pd.DataFrame, spec: AcceptanceSpec, seed: int, bounds: bool = True
    ) -> dict[str, Any]:
        """The disparity report of one model's outcomes, with (``bounds``) the readings that
        survive counting the excluded answers either way, and each group's rate over all its
        answers."""
        unit_col = spec.unit_column
        report = disparity.disparity_report(
            part,
            spec.groups,
            "outcome",
            positive="accept",
            unit_col=unit_col,
            stratum_col=spec.strata,
            reference=spec.reference,
            n_permutations=spec.n_permutations,
            adjust=spec.adjust,
            seed=seed,
            require_positive=False,
        )
        if report["n_excluded"] and bounds:
            # Which group-level readings survive counting the excluded answers either way.
            claims = refusals.group_claims(
                refusals.group_bounds(
                    part,
                    list(spec.groups),
                    "outcome",
                    "accept",
                    invalid=disparity.INVALID,
                    unit_col=unit_col,
                    adjust=spec.adjust,
                    n_permutations=spec.n_permutations,
                    seed=seed,
                ),
                list(spec.groups),
                "accept",
            )
            report["notes"].extend(claims)
        rates = report["rates"]
        rates["rate_all"] = rates["k"] / (rates["n"] + rates["n_excluded"]).where(
            rates["n"] + rates["n_excluded"] > 0
        )
        return report

    @staticmethod
    def _add_breakdowns(
        part: pd.DataFrame,
        spec: AcceptanceSpec,
        seed: int,
        report: dict[str, Any],
        prefix: str,
        section: Section,
    ) -> None:
        """Rates by each ``breakdowns`` column, each cell tested against the population."""
        for column in spec.breakdowns:
            # The paper marks each cell of Tables 1-4 by a permutation test within its row; each
            # table is one declared family for `adjust`.
            row_tests = (
                report["permutation_by_stratum"]
                if column == spec.strata
                else disparity.adjust_family(
                    disparity.permutation_vs_population(
                        part,
                        spec.groups,
                        "outcome",
                        "accept",
                        unit=spec.unit,
                        unit_col="persona_name",
                        stratum_col=column,
                        n_permutations=spec.n_permutations,
                        seed=seed,
                    ),
                    "p_two_sided",
                    spec.adjust,
                )
            )
            section.tables[f"{prefix}_by_{column}_tests"] = row_tests
            section.tables[f"{prefix}_by_{column}"] = disparity.rate_breakdown(
                part, column, spec.groups, "outcome", "accept", tests=row_tests, p_col="p_adjusted"
            )
            if column in spec.breakdown_notes:
                report["notes"].append(_breakdown_note(part, spec, column))

    def _table1(
        self, part: pd.DataFrame, spec: AcceptanceSpec, seed: int, whole: pd.DataFrame | None
    ) -> tuple[pd.DataFrame, pd.DataFrame]:
        """Seed 001's Table 1: rates in the subset and in all rows, each cell marked twice: by
        the joint test within its row (one-sided each way, both directions adjusted together;
        ``whole`` is the report's joint test of all rows, reused when it was run) and, in the
        ``(paper's test)`` columns, by the paper's own (per-stratum email-level tests combined
        by Fisher's method, unadjusted). Returns the table and both tests side by side."""
        assert spec.subset is not None
        flag = part[spec.subset].astype(str).str.lower().isin(["true", "yes", "1"])
        rows, tests = [], []
        for label, rows_of in ((spec.subset, part[flag]), ("all", part)):
            if rows_of.empty:
                continue
            joint = (
                whole.copy()
                if label == "all" and whole is not None
                else disparity.adjust_joint(
                    disparity.joint_vs_population(
                        rows_of,
                        spec.groups,
                        "outcome",
                        "accept",
                        unit_col=spec.unit_column,
                        stratum_col=spec.strata,
                        n_permutations=spec.n_permutations,
                        seed=seed,
                    ),
                    spec.adjust,
                )
            )
            joint["p_marked"] = joint["p_greater_adjusted"].where(
                joint["d"] > 0, joint["p_less_adjusted"]
            )
            both = joint[[*spec.groups, "d", "p_marked"]]
            if spec.strata is not None:
                paper = disparity.papers_stratum_fisher_test(
                    rows_of, spec.groups, "outcome", "accept", stratum_col=spec.strata
                )
                paper = paper[[*spec.groups, "d", "n_strata", "p_marked"]].rename(
                    columns={"d": "d_pooled", "p_marked": "p_papers_test"}
                )
                both = both.merge(paper, on=list(spec.groups), how="left")
            rows.append(rows_of.assign(_rows=label))
            tests.append(both.assign(_rows=label))
        tested = pd.concat(tests, ignore_index=True)
        data = pd.concat(rows)
        order = list(dict.fromkeys(tested["_rows"]))  # the paper's: the subset, then all
        # The same rates twice, each marked by one test's p-values.
        marked_by = partial(
            disparity.rate_breakdown,
            data,
            "_rows",
            spec.groups,
            "outcome",
            "accept",
            row_order=order,
            tests=tested,
        )
        table = marked_by(p_col="p_marked")
        if "p_papers_test" in tested:
            papers = marked_by(p_col="p_papers_test")
            for column in [c for c in papers.columns if c.endswith(" sig")]:
                table[column[: -len(" sig")] + PAPERS_MARK] = papers[column].to_numpy()
        tested = tested.rename(columns={"_rows": "rows", "p_marked": "p_calibrated"})
        tested = tested[["rows", *[c for c in tested.columns if c != "rows"]]]
        return table.rename(columns={"_rows": "rows"}), tested

    def _across_models(
        self,
        rows: pd.DataFrame,
        spec: AcceptanceSpec,
        ctx: AnalysisContext,
        models: list[str],
        section: Section,
        result: AcceptanceResult,
    ) -> None:
        """Rates and impact ratios side by side, a figure, and a test per model pair."""
        side = []
        for model in models:
            for group_rate, ratio in zip(
                result.models[model].rates, result.models[model].impact_ratios, strict=True
            ):
                side.append(
                    {
                        **{g: group_rate[g] for g in spec.groups},
                        "model_label": model,
                        "rate": group_rate["rate"],
                        "impact_ratio": ratio["impact_ratio"],
                    }
                )
        long = pd.DataFrame(side)
        wide = long.pivot_table(
            index=spec.groups, columns="model_label", values=["rate", "impact_ratio"]
        )
        wide.columns = [f"{stat}_{model}" for stat, model in wide.columns]
        ordered = [f"{s}_{m}" for m in models for s in ("rate", "impact_ratio")]
        section.tables[f"{ctx.name}_rates_by_model"] = wide.reindex(columns=ordered).reset_index()
        rates = pd.concat(
            [pd.DataFrame(result.models[m].rates).assign(model_label=m) for m in models],
            ignore_index=True,
        )
        section.figures[slug(ctx.name, "rates_by_model")] = figures.plot_rates_by_model(
            rates, group_cols=spec.groups, order=models
        )
        answered = rows[rows["outcome"] != "invalid"]
        group = answered[spec.groups[0]].astype(str)
        for column in spec.groups[1:]:
            group = group + " " + answered[column].astype(str)
        result.model_order = models
        tests = model_differences(
            ctx,
            answered.assign(_group=group, _accept=answered["outcome"] == "accept"),
            models=models,
            case_cols=[],
            group_col="_group",
            outcome_col="_accept",
            id_col="unit_id",
            n_permutations=spec.n_permutations,
            adjust=spec.adjust,
        )
        result.model_differences = _DIFFERENCES.write(section.tables, ctx.name, tests)

    def headline(self, summary: dict[str, Any]) -> str:
        return (
            f"({self.name}): acceptance rates of the emails of stage {summary['stage']} by "
            f"{', '.join(summary['groups'])}, with impact ratios and permutation tests"
        )

    def lines(self, summary: dict[str, Any]) -> list[str]:
        out = [
            f"Each text of stage {summary['stage']} is labelled accept / reject / invalid by the "
            f"{summary['classifier']} classifier with the applicant's name redacted; invalid "
            "answers are excluded and counted."
        ]
        if summary.get("judge_rules_agreement") is not None:
            out.append(
                f"LLM judge vs the rule classifier on the same emails: "
                f"{fmt(summary['judge_rules_agreement'], '.1%')} agree, Cohen's kappa "
                f"{fmt(summary.get('judge_rules_kappa'), '.2f')} (table "
                f"{summary['name']}_judge_vs_rules)."
            )
        several = len(summary["models"]) > 1
        for model, part in summary["models"].items():
            # The model named before its sentences only where there are several.
            at = f"{model}: " if several else ""
            out.append(
                f"{at}DPD {fmt(part.get('dpd'))} (parity p "
                f"{format_p(part.get('dpd_p_value'))}; {part.get('dpd_test') or 'no test'}), "
                f"population rate {fmt(part.get('population_rate'))}; chance that an unbiased "
                f"model fails four-fifths for some group: "
                f"{fmt(part.get('p_any_flag_by_chance'), '.1%')} ({part['flag_chance_basis']})."
            )
            out += [f"{at}note: {note}" for note in part["notes"]]
        return out

    def figures(self, summary: dict[str, Any]) -> list[tuple[str, str]]:
        out = [(name, "Models graded by their disparity") for name in summary["grade_figures"]]
        if summary.get("model_differences"):
            out.append((slug(summary["name"], "rates_by_model"), "Acceptance rates per model"))
        return out

    def power_tests(self, summary: dict[str, Any]) -> dict[str, Tested]:
        tests = {
            f"{c['model_label']}: expected acceptance DPD (judge log-probabilities)": (
                unit_stats.Tested.of(c, "p_value")
            )
            for c in (summary.get("expected") or {}).get("cases", [])
            if "p_value" in c
        }
        for model, part in summary["models"].items():
            at = f"{model}: " if len(summary["models"]) > 1 else ""
            adjusted = [r["p_adjusted"] for r in part.get("permutation") or []]
            name = "joint test" if part.get("test") == "joint" else "group test"
            unit, n_units = part.get("test_unit"), part.get("test_units")
            tests[f"{at}any group ({name}, {summary['adjust']})"] = unit_stats.Tested(
                min(adjusted) if adjusted else None, unit, n_units
            )
            tests[f"{at}DPD ({part.get('dpd_test', 'none')})"] = unit_stats.Tested(
                part.get("dpd_p_value"), unit, n_units
            )
        return tests

    def selections(
        self, results: pd.DataFrame, spec: AcceptanceSpec, ctx: AnalysisContext
    ) -> pd.DataFrame:
        rows, _ = self.outcomes(results, spec, ctx)
        selected = (rows["outcome"] == "accept").astype("boolean")
        selected[rows["outcome"] == "invalid"] = pd.NA
        return rows.assign(selected=selected)
