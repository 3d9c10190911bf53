"""Where things are, for tests at any depth of the test tree."""

import os
from pathlib import Path

#: The repository root (the checkout).
ROOT = Path(__file__).resolve().parents[1]
#: The test tree's own data files.
TEST_DATA = ROOT / "tests" / "data"
#: The papers and the authors' released data: the folder the environment variable
#: ``BIASIM_SHARED`` names (a worktree elsewhere), else ``shared`` beside the checkout. Every
#: test reads it from here, and skips when what it needs is absent.
SHARED = Path(os.environ.get("BIASIM_SHARED") or ROOT.parent / "shared").expanduser()
