"""Where things are, for tests at any depth of the test tree."""

from pathlib import Path

#: The repository root (the checkout).
ROOT = Path(__file__).resolve().parents[1]
#: The test tree's own data files.
TEST_DATA = ROOT / "tests" / "data"
#: The papers and the authors' released data, beside the checkout; tests skip when absent.
SHARED = ROOT.parent / "shared"
