"""``python -m tests.golden [--update] [STUDY ...]``: run every built-in study (or those named)
on the synthetic responder and compare its tables with the recordings; print what changed, and
with ``--update`` (``make golden``) rewrite the recordings. Exit 1 when a table changed and was
not updated."""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from tests.builtin_runs import STUDIES, run_builtin
from tests.golden import changes, golden_path, run_text


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.golden", description=__doc__)
    parser.add_argument("--update", action="store_true", help="rewrite the recordings")
    parser.add_argument("studies", nargs="*", metavar="STUDY", help="default: every one")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.studies) - set(STUDIES))
    if unknown:
        parser.error(f"not a built-in study run here: {', '.join(unknown)}")
    changed = 0
    with tempfile.TemporaryDirectory(prefix="golden-") as tmp:
        for study in args.studies or STUDIES:
            text = run_text(run_builtin(study, Path(tmp) / study))
            path = golden_path(study)
            recorded = path.read_text(encoding="utf-8") if path.is_file() else ""
            if text == recorded:
                continue
            changed += 1
            print(f"{study}: " + ("recorded now" if not recorded else "changed"))
            for line in changes(recorded, text) if recorded else []:
                print(f"  {line}")
            if args.update:
                path.write_text(text, encoding="utf-8")
    verb = "rewritten" if args.update else "differ (make golden rewrites them)"
    print(f"{changed} of {len(args.studies or STUDIES)} recordings {verb}" if changed else "ok")
    return 1 if changed and not args.update else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
