"""Record the golden analysis inputs (results, manifest) and outputs (tables, summaries) of
``tests/golden_studies.py`` with the code on the Python path (run once, on the commit named
there): ``PYTHONPATH=<checkout of that commit> python tests/data/golden/record.py``."""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from golden_studies import GOLDEN_DIR, STUDIES

from biasim.simulator.engine.runner import RunOptions, execute, prepare

for name, (text, options) in STUDIES.items():
    with tempfile.TemporaryDirectory() as tmp:
        study = Path(tmp) / f"{name}.yaml"
        study.write_text(text)
        out = Path(tmp) / "run"
        outcome = execute(prepare(RunOptions(study=str(study), out=out, **options)))
        target = GOLDEN_DIR / name
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(out / "tables", target)
        # The inputs too: the identity test re-analyses these very answers, so it checks the
        # analysis code alone, whatever the engine's draws become.
        shutil.copy(out / "results.parquet", target / "results.parquet")
        manifest = json.loads((out / "manifest.json").read_text())
        manifest["study_path"] = study.name  # not the temporary directory of this machine
        (target / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
        (target / "analyses.json").write_text(
            json.dumps(outcome.summary["analyses"], indent=1, sort_keys=True, default=str) + "\n"
        )
        print(name, len(list(target.iterdir())), "files")
