"""Bad-input errors that name the file, the line and the field at fault (exit code 2)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong with the input.

    Attributes:
        file: File the problem is in (or the command-line option that caused it).
        line: 1-based line number, when known.
        field: Dotted path of the field, e.g. ``stages[0].prompt``.
        message: What is wrong, in a sentence a study author can act on.
    """

    file: str
    line: int | None
    field: str
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        message = _shortened(self.message)
        return f"{where}: {self.field}: {message}" if self.field else f"{where}: {message}"


#: Longest message printed whole: a value quoted from a hostile file (a 100,000-character cell)
#: would otherwise fill the terminal. The middle goes; the start and the advice at the end stay.
MAX_MESSAGE_CHARS = 2000


def _shortened(message: str) -> str:
    if len(message) <= MAX_MESSAGE_CHARS:
        return message
    keep = MAX_MESSAGE_CHARS // 2
    left_out = len(message) - 2 * keep
    return f"{message[:keep]}...[{left_out:,} characters left out]...{message[-keep:]}"


class InputError(Exception):
    """The user's input cannot be used; the CLI exits with code 2 and writes nothing."""

    def __init__(self, problems: Iterable[Problem] | str) -> None:
        if isinstance(problems, str):
            problems = [Problem(file="", line=None, field="", message=problems)]
        self.problems: list[Problem] = list(problems)
        super().__init__("\n".join(str(p).removeprefix(": ") for p in self.problems))


def format_path(path: tuple[str | int, ...]) -> str:
    """Render a field path as ``a.b[0].c``."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out
