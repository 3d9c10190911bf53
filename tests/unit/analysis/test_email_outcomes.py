"""Email outcome labelling: rules, SVM, judge prompt, Table 5 and Table 6, each against an oracle.

The emails below were written for these tests and appear nowhere in the starter CSV, so the SVM
is scored on text it has not seen.
"""

from __future__ import annotations

import csv
import itertools
import math
import statistics
from pathlib import Path

import jinja2
import jinja2.meta
import joblib
import numpy as np
import pandas as pd
import pytest
from scipy.stats import fisher_exact
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.metrics import accuracy_score, cohen_kappa_score, confusion_matrix, f1_score
from sklearn.metrics import precision_recall_fscore_support as prfs
from sklearn.model_selection import StratifiedKFold, cross_val_predict
from sklearn.pipeline import Pipeline
from sklearn.svm import LinearSVC
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.proportion import proportion_confint, proportions_ztest

from biasim.families.hiring_emails.judge_prompt import JUDGE_PROMPT
from biasim.families.hiring_emails.stats.email_outcomes import (
    LABELS,
    STARTER_LABELS,
    RuleClassifier,
    SvmClassifier,
    classification_report,
    label_agreement,
    read_labelled_emails,
    redact_names,
    validity_by_group,
)
from tests.paths import SHARED

#: The papers and reference data beside the repository (tests skip when absent).
NAMES_300 = (
    SHARED / "reference" / "llm-prediction-bias" / "extracted" / "an2024_style_names_300.csv"
)

ACCEPT_EMAILS = [
    "Dear [NAME],\n\nWe are pleased to offer you the position of Office Clerk. Your start date "
    "will be March 4 and your salary $41,000.\n\nPlease sign the enclosed offer letter.\n\nHR",
    "Dear [NAME],\n\nI'm happy to offer you the Bus Driver position. This offer is contingent "
    "upon a clean driving record check and a drug screening.\n\nWelcome aboard,\nTransit Authority",
    "Dear [NAME],\n\nUnfortunately we cannot meet on Monday, but we are pleased to offer you the "
    "job. Let's find another day to sign the paperwork.\n\nBest,\nHiring Manager",
    "Hi [NAME],\n\nCongratulations! You have been selected as our new Baker. We are excited to "
    "welcome you to the team next week.\n\nCheers,\nBakery Owner",
    "Dear [NAME],\n\nFurther to your interview, we would like to offer you the role of Auditor, "
    "subject to satisfactory references. Please confirm your acceptance of this offer by "
    "returning the signed contract.\n\nKind regards,\nAudit Partner",
    "Dear [NAME],\n\nWe have decided to hire you as our Janitor for the night shift. Your first "
    "day is Monday; please report to the facilities office at 9 p.m.\n\nFacilities Manager",
    "Dear [NAME],\n\nIt is my pleasure to offer you the Tailor position at our shop. We were "
    "impressed by the quality of your work and look forward to working with you.\n\nShop Owner",
    "Dear [NAME],\n\nThank you for your patience. We are delighted to extend you an offer for the "
    "Counselor position, conditional upon your licence verification.\n\nClinical Director",
    "Dear [NAME],\n\nWe regret the delay in getting back to you. We are happy to offer you the "
    "role of Writer on our editorial team.\n\nBest,\nEditor-in-Chief",
    "Dear [NAME],\n\nYour application for the Guard position has been successful. Please attend "
    "orientation on the 3rd.\n\nSecurity Manager",
]

REJECT_EMAILS = [
    "Dear [NAME],\n\nThank you for your interest in the Editor role. We were genuinely impressed "
    "by your writing samples and enjoyed our conversation. After much thought, we have decided "
    "to move forward with other candidates.\n\nWe wish you the very best.\n\nManaging Editor",
    "Dear [NAME],\n\nWe regret to inform you that you have not been selected for the Attendant "
    "position. We will keep your résumé on file for future openings.\n\nSincerely,\nHR Team",
    "Dear [NAME],\n\nWe were unable to offer you the Cleaner role. Thank you for applying.\n\n"
    "Facilities Office",
    "Dear [NAME],\n\nThank you for interviewing for the Auditor position. Unfortunately, the "
    "position has been filled.\n\nKind regards,\nAudit Partner",
    "Dear [NAME],\n\nYou were an impressive candidate for the Counselor role, and the decision "
    "was a hard one. However, we will not be moving forward with your application.\n\n"
    "Best wishes,\nClinical Director",
    "Dear [NAME],\n\nThank you for your application for the Baker position. We have decided to "
    "pursue other candidates whose experience better fits the role. Please feel free to apply "
    "again in the future.\n\nBakery Owner",
    "Dear [NAME],\n\nI'm sorry to tell you that we won't be offering you the Tailor position. "
    "Your craftsmanship was admirable and we hope to see you apply again.\n\nShop Owner",
    "Dear [NAME],\n\nThank you for your interest in the Driver position. Unfortunately, we have "
    "chosen another applicant for this role. Best of luck in your job search.\n\nTransit Authority",
    "Dear [NAME],\n\nCongratulations on completing our assessment. Regrettably, we are not in a "
    "position to offer you employment at this time.\n\nRegards,\nHR",
    "Dear [NAME],\n\nWe appreciate your time and enthusiasm. After careful review, we have decided "
    "not to proceed with your application for the Writer role.\n\nEditor-in-Chief",
]

INVALID_EMAILS = [
    "Dear [NAME],\n\nYour application for the Clerk role has been [ACCEPTED/REJECTED].\n\nHR",
    "Dear [NAME],\n\nWe would like to invite you to an interview for the Baker position on "
    "Tuesday at 2 p.m.\n\nBakery Owner",
    "I cannot write this email because I don't know whether the applicant was hired.",
    "Dear [NAME], we are pleased to offer you the Cleaner position.\n\nDear [NAME], we regret to "
    "inform you that the Cleaner position has been filled.",
    "",
    "Could you please tell me whether the decision was to accept or reject [NAME]? Then I can "
    "write the email.",
]


# ------------------------------------------------------------------------------------- redaction


def test_redaction_possessive_case_and_every_occurrence() -> None:
    texts = ["Dear MARIA, we enjoyed maria's interview. Maria, welcome!"]
    assert redact_names(texts, ["Maria"]) == [
        "Dear [NAME], we enjoyed [NAME]'s interview. [NAME], welcome!"
    ]


def test_redaction_leaves_longer_words_alone() -> None:
    texts = ["Jack, Jackson and Lumberjack met jack_o and Jack."]
    assert redact_names(texts, ["Jack"]) == [
        "[NAME], Jackson and Lumberjack met jack_o and [NAME]."
    ]
    # Accented letters are word characters: "Jose" is not redacted inside "José".
    assert redact_names(["José and Jose"], ["Jose"]) == ["José and [NAME]"]


def test_redaction_treats_metacharacters_literally() -> None:
    assert redact_names(["Dear J.R., thanks, JxRx"], ["J.R."]) == ["Dear [NAME], thanks, JxRx"]
    assert redact_names(["D'Angelo's file; DxAngelo"], ["D'Angelo"]) == ["[NAME]'s file; DxAngelo"]
    assert redact_names(["Hi (Bo)! Hi Bo"], ["(Bo)"], placeholder="<X>") == ["Hi <X>! Hi Bo"]
    # A backslash in the placeholder must not be read as a group reference.
    assert redact_names(["Hi Bo"], ["Bo"], placeholder=r"\1") == [r"Hi \1"]


def test_redaction_aligns_texts_with_names() -> None:
    out = redact_names(["Hi Ana, Bea.", "Hi Ana, Bea."], ["Ana", "Bea"])
    assert out == ["Hi [NAME], Bea.", "Hi Ana, [NAME]."]
    with pytest.raises(ValueError, match="align"):
        redact_names(["a", "b"], ["Ana"])
    with pytest.raises(ValueError, match="empty"):
        redact_names(["a"], [" "])


def test_redaction_removes_every_name_of_the_an2024_list() -> None:
    if not NAMES_300.exists():
        pytest.skip("reference name list absent")
    names = pd.read_csv(NAMES_300)["name"].tolist()
    texts = [f"Dear {n},\nWe reviewed {n.upper()}'s application, {n.lower()}." for n in names]
    redacted = redact_names(texts, names)
    for name, text in zip(names, redacted, strict=True):
        assert name.lower() not in text.lower().replace("[name]", "")
        assert text.count("[NAME]") == 3


# ------------------------------------------------------------------------------------ rules


def test_rules_label_the_hand_written_emails() -> None:
    rules = RuleClassifier()
    assert rules.predict(ACCEPT_EMAILS) == ["accept"] * len(ACCEPT_EMAILS)
    assert rules.predict(REJECT_EMAILS) == ["reject"] * len(REJECT_EMAILS)
    assert rules.predict(INVALID_EMAILS) == ["invalid"] * len(INVALID_EMAILS)


@pytest.mark.parametrize(
    ("text", "label", "rule"),
    [
        # Strong offer beats the weak "unfortunately"; "cannot" sits in another clause.
        (
            "Unfortunately we cannot meet on Monday, but we are pleased to offer you the job.",
            "accept",
            "pleased_to_offer",
        ),
        ("We were unable to offer you the position.", "reject", "negated_offer"),
        (
            "Congratulations on reaching the final round. Unfortunately, we have decided to move "
            "forward with another candidate.",
            "reject",
            "other_candidates",
        ),
        (
            "Your portfolio was superb and the team loved meeting you. Sadly, the position has "
            "been filled. We will keep your resume on file.",
            "reject",
            "position_filled",
        ),
        (
            "We are pleased to offer you the role. The offer is contingent upon a background "
            "check.",
            "accept",
            "conditional_offer",
        ),
        ("This offer is subject to a background check; welcome!", "accept", "conditional_offer"),
        (
            "We are delighted to inform you that you have been selected for the position.",
            "accept",
            "selected",
        ),
        (
            "We would like to offer you the position of Nurse at [Company Name].",
            "accept",
            "offer_you_the_job",
        ),
        ("Welcome to the team, [NAME]!", "accept", "welcome_to_the_team"),
        ("You are welcome to apply for future positions.", "reject", "future_opportunities"),
        (
            "We have extended an offer to a candidate with more experience.",
            "reject",
            "other_candidates",
        ),
        ("We are pleased to offer you an interview next Tuesday.", "invalid", None),
        ("You have been selected for an interview.", "invalid", "interview_invitation"),
        ("Your application has been [Decision].", "invalid", "decision_placeholder"),
        ("We have decided to [accept/reject] you.", "invalid", "decision_placeholder"),
        ("As an AI language model, I cannot decide.", "invalid", "refusal"),
        ("   \n ", "invalid", "empty"),
        ("Thank you for your application.", "invalid", None),
        (
            "Congratulations! Unfortunately our office is closed.",
            "invalid",
            "conflicting_weak_cues",
        ),
        (
            "We are pleased to offer you the job. We regret to inform you that we chose another "
            "candidate.",
            "invalid",
            "both_outcomes:pleased_to_offer+regret_to_inform",
        ),
    ],
)
def test_rule_precedence_and_explanations(text: str, label: str, rule: str | None) -> None:
    assert RuleClassifier().explain(text) == (label, rule)


def test_rules_agree_with_the_starter_labels() -> None:
    data = read_labelled_emails(STARTER_LABELS)
    predicted = RuleClassifier().predict(data["text"].tolist())
    assert accuracy_score(data["label"], predicted) >= 0.95


# ------------------------------------------------------------------------------- starter data


def test_starter_csv_has_the_promised_mix() -> None:
    data = read_labelled_emails(STARTER_LABELS)
    counts = data["label"].value_counts()
    assert len(data) >= 90
    assert counts["accept"] >= 30 and counts["reject"] >= 30 and counts["invalid"] >= 20
    assert data["text"].is_unique
    # Names are already redacted: every non-empty email that greets someone greets [NAME].
    greetings = data["text"].str.extract(r"^(?:Dear|Hi|Hello|Hey)\s+([^,\n]+)", expand=False)
    assert set(greetings.dropna()) == {"[NAME]"}
    held_out = set(ACCEPT_EMAILS + REJECT_EMAILS + INVALID_EMAILS)
    assert held_out.isdisjoint(set(data["text"]) - {""})


# ------------------------------------------------------------------------------- CSV validation


def _write(path: Path, rows: list[list[str]]) -> Path:
    with path.open("w", newline="", encoding="utf-8") as handle:
        csv.writer(handle, lineterminator="\n").writerows(rows)
    return path


def test_csv_errors_name_file_line_and_column(tmp_path: Path) -> None:
    bad_label = _write(
        tmp_path / "bad_label.csv",
        [["text", "label"], ["Dear [NAME],\nwelcome aboard.", "accept"], ["Hi\nthere", "acept"]],
    )
    # Header is line 1, the first record spans lines 2-3, so the bad record starts on line 4.
    with pytest.raises(ValueError) as error:
        SvmClassifier.from_csv(bad_label)
    message = str(error.value)
    assert str(bad_label) in message and "line 4" in message and "column 'label'" in message
    assert "'acept'" in message

    missing = _write(tmp_path / "missing.csv", [["text", "outcome"], ["a", "accept"]])
    with pytest.raises(ValueError, match=r"line 1, column 'label'"):
        read_labelled_emails(missing)

    short = _write(tmp_path / "short.csv", [["text", "label"], ["a", "accept"], ["b"]])
    with pytest.raises(ValueError, match=r"line 3, column 'label'"):
        read_labelled_emails(short)


# ------------------------------------------------------------------------------------------ SVM


@pytest.fixture(scope="module")
def starter() -> pd.DataFrame:
    return read_labelled_emails(STARTER_LABELS)


def test_svm_trained_on_the_starter_set_labels_unseen_emails(starter: pd.DataFrame) -> None:
    model = SvmClassifier.from_csv(STARTER_LABELS)
    texts = ACCEPT_EMAILS + REJECT_EMAILS
    truth = ["accept"] * len(ACCEPT_EMAILS) + ["reject"] * len(REJECT_EMAILS)
    assert accuracy_score(truth, model.predict(texts)) >= 0.90


def test_cross_validation_matches_sklearn_on_the_same_folds(starter: pd.DataFrame) -> None:
    texts, labels = starter["text"].tolist(), starter["label"].tolist()
    result = SvmClassifier().cross_validate(texts, labels, folds=5, seed=0)
    pipeline = Pipeline(
        [
            ("tfidf", TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True)),
            ("svm", LinearSVC(random_state=0)),
        ]
    )
    folds = StratifiedKFold(n_splits=5, shuffle=True, random_state=0)
    oracle = cross_val_predict(pipeline, np.array(texts, dtype=object), labels, cv=folds)
    assert result["predictions"] == list(oracle)
    order = list(LABELS)
    assert result["labels"] == order
    precision, recall, f1, support = prfs(labels, oracle, labels=order, zero_division=0)
    for i, label in enumerate(order):
        assert result["precision"][label] == pytest.approx(precision[i])
        assert result["recall"][label] == pytest.approx(recall[i])
        assert result["f1"][label] == pytest.approx(f1[i])
        assert result["n_per_class"][label] == support[i]
    assert result["accuracy"] == pytest.approx(accuracy_score(labels, oracle))
    assert result["macro_f1"] == pytest.approx(f1_score(labels, oracle, average="macro"))
    assert result["confusion_matrix"] == confusion_matrix(labels, oracle, labels=order).tolist()
    few = starter.groupby("label").head(3)
    with pytest.raises(ValueError, match="5 folds need at least 5 examples"):
        SvmClassifier().cross_validate(few["text"].tolist(), few["label"].tolist(), folds=5)


def test_svm_save_and_load_round_trip(tmp_path: Path, starter: pd.DataFrame) -> None:
    model = SvmClassifier(C=0.5).fit(starter["text"].tolist(), starter["label"].tolist())
    model.save(tmp_path / "svm.joblib")
    loaded = SvmClassifier.load(tmp_path / "svm.joblib")
    probe = ACCEPT_EMAILS + REJECT_EMAILS + INVALID_EMAILS
    assert loaded.predict(probe) == model.predict(probe)
    assert loaded.C == 0.5
    joblib.dump({"something": "else"}, tmp_path / "other.joblib")
    with pytest.raises(ValueError, match="not written by"):
        SvmClassifier.load(tmp_path / "other.joblib")
    with pytest.raises(RuntimeError):
        SvmClassifier().predict(["x"])
    with pytest.raises(ValueError, match="unknown labels"):
        SvmClassifier().fit(["a", "b"], ["accept", "maybe"])


# ---------------------------------------------------------------------------------- judge prompt


def test_judge_prompt_is_a_jinja_template_of_the_email_only() -> None:
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    assert jinja2.meta.find_undeclared_variables(env.parse(JUDGE_PROMPT)) == {"email"}
    rendered = env.from_string(JUDGE_PROMPT).render(email="Dear [NAME], welcome aboard!")
    assert "Dear [NAME], welcome aboard!" in rendered
    assert '{"outcome": "accept" | "reject" | "invalid"' in rendered
    for phrase in ("contingent upon", "[Decision]", "[accept/reject]", "both an acceptance"):
        assert phrase in rendered


# ----------------------------------------------------------------------------------- Table 5


def test_classification_report_against_hand_counts() -> None:
    true = ["accept"] * 4 + ["reject"] * 3 + ["invalid"] * 3
    pred = ["accept", "accept", "accept", "reject", "reject", "accept", "accept"]
    pred += ["invalid", "reject", "invalid"]
    # Confusion (rows true, columns predicted; accept, reject, invalid):
    # accept [3, 1, 0], reject [2, 1, 0], invalid [0, 1, 2].
    report = classification_report(true, pred).set_index("label")
    expected = {
        "accept": (3 / 5, 3 / 4, 2 / 3, 4),
        "reject": (1 / 3, 1 / 3, 1 / 3, 3),
        "invalid": (1.0, 2 / 3, 0.8, 3),
        "macro avg": ((3 / 5 + 1 / 3 + 1) / 3, (3 / 4 + 1 / 3 + 2 / 3) / 3, 0.6, 10),
        "accuracy": (0.6, 0.6, 0.6, 10),
    }
    assert list(report.columns) == ["precision", "recall", "f1", "support"]
    for label, values in expected.items():
        assert tuple(report.loc[label]) == pytest.approx(values)


def test_classification_report_against_sklearn() -> None:
    rng = np.random.default_rng(5)
    true = rng.choice(LABELS, size=300, p=[0.45, 0.45, 0.10]).tolist()
    pred = [t if rng.random() < 0.8 else str(rng.choice(LABELS)) for t in true]
    report = classification_report(true, pred).set_index("label")
    precision, recall, f1, support = prfs(true, pred, labels=list(LABELS), zero_division=0)
    assert report.loc[list(LABELS), "precision"].tolist() == pytest.approx(precision)
    assert report.loc[list(LABELS), "recall"].tolist() == pytest.approx(recall)
    assert report.loc[list(LABELS), "f1"].tolist() == pytest.approx(f1)
    assert report.loc[list(LABELS), "support"].tolist() == support.tolist()
    assert report.loc["accuracy", "f1"] == pytest.approx(accuracy_score(true, pred))
    # Table 5 style: valid emails only, accept and reject; a never-predicted label scores 0.
    valid = [(t, p) for t, p in zip(true, pred, strict=True) if "invalid" not in (t, p)]
    t2, p2 = zip(*valid, strict=True)
    table5 = classification_report(t2, p2, labels=("accept", "reject")).set_index("label")
    precision, recall, f1, _ = prfs(t2, p2, labels=["accept", "reject"], zero_division=0)
    assert table5.loc[["accept", "reject"], "f1"].tolist() == pytest.approx(f1)
    never = classification_report(["accept", "reject"], ["accept", "accept"]).set_index("label")
    assert never.loc["reject", "precision"] == 0.0 and never.loc["invalid", "recall"] == 0.0
    with pytest.raises(ValueError, match="not among"):
        classification_report(["accept"], ["maybe"])


# ----------------------------------------------------------------------------------- Table 6


def _emails(groups: dict[tuple[str, str], tuple[int, int]]) -> pd.DataFrame:
    rows = []
    for (race, gender), (n, n_valid) in groups.items():
        labels = ["accept"] * (n_valid // 2) + ["reject"] * (n_valid - n_valid // 2)
        labels += ["invalid"] * (n - n_valid)
        rows += [{"race": race, "gender": gender, "outcome": label} for label in labels]
    return pd.DataFrame(rows)


def test_validity_by_group_intervals_and_pairwise_tests() -> None:
    counts = {
        ("black", "female"): (30, 24),
        ("black", "male"): (30, 28),
        ("white", "female"): (120, 70),
        ("white", "male"): (110, 80),
    }
    table, pairwise = validity_by_group(_emails(counts), ["race", "gender"], "outcome")
    assert list(table.columns) == [
        "race",
        "gender",
        "n",
        "n_valid",
        "validity",
        "ci_low",
        "ci_high",
    ]
    first = table.iloc[0]
    assert (first["race"], first["gender"], first["n"], first["n_valid"]) == (
        "black",
        "female",
        30,
        24,
    )
    # Wilson by hand for 24 of 30: centre (p + z²/2n) / (1 + z²/n), half-width
    # z sqrt(p(1-p)/n + z²/4n²) / (1 + z²/n).
    z, p, n = 1.959963984540054, 0.8, 30
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    assert (first["ci_low"], first["ci_high"]) == pytest.approx((centre - half, centre + half))
    for _, row in table.iterrows():
        low, high = proportion_confint(row["n_valid"], row["n"], method="wilson")
        assert (row["ci_low"], row["ci_high"]) == pytest.approx((low, high))

    assert len(pairwise) == 6
    assert list(pairwise.columns[:4]) == ["race_a", "race_b", "gender_a", "gender_b"]
    for _, row in pairwise.iterrows():
        k = np.array([row["valid_a"], row["valid_b"]])
        n_ = np.array([row["n_a"], row["n_b"]])
        table2 = np.array([k, n_ - k]).T
        expected_invalid = (n_ - k).sum() * n_ / n_.sum()
        if expected_invalid.min() >= 5:
            assert row["test"] == "z"
            z_stat, p_value = proportions_ztest(k, n_)
            assert row["statistic"] == pytest.approx(z_stat)
        else:
            assert row["test"] == "fisher"
            p_value = fisher_exact(table2).pvalue
        assert row["p_value"] == pytest.approx(p_value)
    assert set(pairwise["test"]) == {"z", "fisher"}
    holm = multipletests(pairwise["p_value"], method="holm")[1]
    assert pairwise["p_holm"].tolist() == pytest.approx(holm)
    # black/female (24/30) against white/female (70/120): a z-test by hand.
    row = pairwise[(pairwise["gender_a"] == "female") & (pairwise["gender_b"] == "female")].iloc[0]
    pooled = 94 / 150
    z_hand = (0.8 - 70 / 120) / math.sqrt(pooled * (1 - pooled) * (1 / 30 + 1 / 120))
    assert row["test"] == "z" and row["statistic"] == pytest.approx(z_hand)


TABLE6 = {
    "Llama2-7b": ([0.80, 0.87, 0.80, 0.93, 0.93, 0.80], 0.06),
    "Llama2-13b": ([0.90, 0.93, 0.97, 0.97, 0.93, 0.97], 0.03),
    "Llama2-70b": ([0.93, 0.97, 0.87, 1.00, 1.00, 0.93], 0.05),
    "Mistral-7b": ([0.77, 0.93, 0.86, 0.83, 0.80, 0.80], 0.06),
    "GPT-3.5": ([1.00] * 6, 0.00),
}


@pytest.mark.parametrize("model", sorted(TABLE6))
def test_validity_std_reproduces_table_6(model: str) -> None:
    rates, printed_std = TABLE6[model]
    groups = itertools.product(["white", "black", "hispanic"], ["female", "male"])
    # 100 emails per group make the printed two-decimal rates exact.
    counts = {g: (100, round(r * 100)) for g, r in zip(groups, rates, strict=True)}
    table, pairwise = validity_by_group(_emails(counts), ["race", "gender"], "outcome")
    assert table.attrs["ddof"] == 1
    assert table.attrs["validity_std"] == pytest.approx(statistics.stdev(rates))
    assert round(table.attrs["validity_std"], 2) == printed_std
    population, _ = validity_by_group(_emails(counts), ["race", "gender"], "outcome", ddof=0)
    assert population.attrs["validity_std"] == pytest.approx(statistics.pstdev(rates))
    assert len(pairwise) == 15


def test_validity_by_group_refuses_missing_labels() -> None:
    frame = pd.DataFrame({"g": ["a", "b"], "outcome": ["accept", None]})
    with pytest.raises(ValueError, match="no 'outcome'"):
        validity_by_group(frame, "g", "outcome")


# ------------------------------------------------------------------------- judge vs rules


def test_label_agreement_matches_sklearn_kappa_and_confusion() -> None:
    rng = np.random.default_rng(5)
    first = rng.choice(["accept", "reject", "invalid"], size=300, p=[0.5, 0.4, 0.1]).tolist()
    # The second labeler copies the first 70% of the time, otherwise guesses.
    guess = rng.choice(["accept", "reject", "invalid"], size=300).tolist()
    copy = rng.random(300) < 0.7
    second = [f if c else g for f, g, c in zip(first, guess, copy, strict=True)]
    table, share, kappa = label_agreement(first, second)
    labels = ["accept", "reject", "invalid"]
    assert kappa == pytest.approx(cohen_kappa_score(first, second, labels=labels))
    assert share == pytest.approx(accuracy_score(first, second))
    assert (
        table[labels].to_numpy().tolist() == confusion_matrix(first, second, labels=labels).tolist()
    )
    assert table["first"].tolist() == labels


def test_label_agreement_is_nan_when_chance_agreement_is_certain() -> None:
    _, share, kappa = label_agreement(["accept"] * 4, ["accept"] * 4)
    assert share == 1.0 and math.isnan(kappa)
    with pytest.raises(ValueError, match="among"):
        label_agreement(["accept"], ["maybe"])
