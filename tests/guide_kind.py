"""The kinds guide's example kind (docs/extending/kinds.md), loaded as its reader would have it:
a module of its own with its codebook beside it, registered while the block runs. The guide's
own test runs it; the snippet test validates the guide's study entry with it."""

from __future__ import annotations

import re
import sys
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from biasim.simulator.kinds import unregister_kind
from tests.paths import ROOT

GUIDE = ROOT / "docs" / "extending" / "kinds.md"
#: The name the guide's kind registers.
KIND = "answer_length"


@contextmanager
def guide_kind(
    folder: Path, edit: Callable[[str], str] = lambda codebook: codebook
) -> Iterator[dict[str, Any]]:
    """The guide's module (its names), registered, its codebook (changed by ``edit``) written
    into ``folder``."""
    text = GUIDE.read_text(encoding="utf-8")
    code = re.search(r"```python\n(.*?)```", text, re.DOTALL)
    codebook = re.search(r"```yaml\n(# codebook of .*?)```", text, re.DOTALL)
    assert code is not None and codebook is not None
    # A module of its own, as the guide's file would be (dataclasses look their module up),
    # with its codebook beside it.
    module = types.ModuleType("mykinds_lengths")
    module.__file__ = str(folder / "lengths.py")
    (folder / "lengths.tables.yaml").write_text(edit(codebook.group(1)), encoding="utf-8")
    sys.modules[module.__name__] = module
    try:
        exec(compile(code.group(1), str(GUIDE), "exec", dont_inherit=True), module.__dict__)
        yield module.__dict__
    finally:
        unregister_kind(KIND)
        del sys.modules[module.__name__]
