"""Small studies whose analysis outputs were recorded before the analysis kinds became plug-ins
(commit a7b51f2, by ``tests/data/golden/record.py``); ``test_kinds_identity`` checks that the
kinds still write exactly those tables and summaries."""

from __future__ import annotations

from pathlib import Path

from biasim.scenarios import builtin_path

GOLDEN_DIR = Path(__file__).parent / "data" / "golden"

#: name -> (study text, run options). Every role runs on the synthetic responder.
STUDIES: dict[str, tuple[str, dict]] = {
    "li2025_small": (
        f"extends: {builtin_path('li2025_decisions')}\nname: li2025_small\n",
        {"backend": "synthetic", "agents": 1},
    ),
    "hiring_small": (
        f"extends: {builtin_path('an2024_hiring')}\n"
        "name: hiring_small\n"
        "roles:\n"
        "  hiring_manager:\n"
        "    backend: synthetic\n"
        "    synthetic:\n"
        "      text:\n"
        "        by: race\n"
        "        probabilities:\n"
        "          White: {'Dear [NAME], we are pleased to offer you the position.': 0.7,\n"
        "                  'Dear [NAME], we regret that we will not move forward.': 0.3}\n"
        "        default: {'Dear [NAME], we are pleased to offer you the position.': 0.5,\n"
        "                  'Dear [NAME], we regret that we will not move forward.': 0.5}\n"
        "design:\n"
        "  agents_per_value: 4\n"
        "  replicate_seeds: [11]\n"
        "  factors:\n"
        "    template: {t2: null, t3: null, t4: null, t5: null}\n"
        "    qualification: {somewhat: null, not_qualified: null}\n",
        {},
    ),
    "hiring_judge_small": (
        f"extends: {builtin_path('an2024_hiring_judge')}\n"
        "name: hiring_judge_small\n"
        "roles:\n"
        "  hiring_manager:\n    backend: synthetic\n"
        "    synthetic: {text: {default: {'We are pleased to offer you the job.': 0.5,\n"
        "                                 'We regret that we cannot offer you the job.': 0.5}}}\n"
        "  judge:\n    backend: synthetic\n"
        "    synthetic:\n      outcome:\n        by: race\n"
        "        probabilities: {White: {accept: 0.8, reject: 0.2}}\n"
        "        default: {accept: 0.4, reject: 0.6}\n"
        "design:\n  agents_per_value: 2\n  replicate_seeds: [11]\n  factors:\n"
        "    template: {t2: null, t3: null, t4: null, t5: null}\n"
        "    qualification: {highly: null, not_qualified: null}\n",
        {},
    ),
}
