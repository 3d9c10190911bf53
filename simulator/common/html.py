"""The self-contained HTML report (``report.html``): one page, figures embedded as data URIs,
no script and no request to anything outside the file.

Every number a kind shows comes from its JSON summary and carries ``data-path`` (its path in
``summary.json`` as a JSON array, since model labels may hold dots) and ``data-value`` (the
unrounded value), so a test can check that the page says what the summary says.
"""

from __future__ import annotations

import base64
import datetime as dt
import html
import json
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:#1d2330;
background:#f6f7f9;line-height:1.45}
main{max-width:1180px;margin:0 auto;padding:24px 28px 60px}
h1{font-size:1.7em;margin:.2em 0}h2{margin-top:1.8em;border-bottom:2px solid #d5d9e0;
padding-bottom:.2em}h3{margin-top:1.4em}
.banner{background:#fff3cd;border:1px solid #e0b300;padding:10px 14px;border-radius:6px;
font-weight:600}
.muted{color:#5b6473}.card{background:#fff;border:1px solid #dde1e7;border-radius:8px;
padding:14px 18px;margin:14px 0}
table{border-collapse:collapse;margin:8px 0 4px;font-size:.88em;background:#fff}
th,td{border:1px solid #d5d9e0;padding:3px 8px;text-align:right;white-space:nowrap}
th{background:#eef1f5}td.t,th.t{text-align:left}
.scroll{overflow-x:auto;max-width:100%}
figure{margin:12px 0;background:#fff;border:1px solid #dde1e7;border-radius:8px;padding:8px}
figure img{max-width:min(100%,780px);height:auto}figcaption{font-size:.85em;color:#5b6473}
.sig{font-weight:700;color:#9c1c1c}.flag{color:#9c1c1c;font-weight:700}
ul.limits li{margin:4px 0}dl{display:grid;grid-template-columns:max-content auto;gap:2px 14px}
dt{font-weight:600}dd{margin:0}nav a{margin-right:12px}
pre{white-space:pre-wrap;word-break:break-word;background:#f3f5f8;padding:8px 10px;
border-radius:6px;font-size:.85em;margin:4px 0}td.answer{white-space:normal;min-width:420px}
details{margin:6px 0}summary{cursor:pointer}
"""


def fmt(value: Any, spec: str = ".3f") -> str:
    """A value as the report prints it: ``-`` when missing, ``yes``/``no`` for booleans.

    Args:
        value: The value.
        spec: A format spec (``.3f``, ``.1%``), ``int``, ``text`` or ``p`` (a p-value: ``.3f``,
            or ``< 0.001`` rather than a misleading ``0.000``, as :func:`format_p` writes it).
            A value that is not zero but would round to zeros is shown as ``1.2e-06``.
    """
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if spec == "text":
        return str(value)
    if spec == "int":
        return f"{int(value):,}"
    if spec == "p" and isinstance(value, int | float):
        return "< 0.001" if value < 0.001 else format(value, ".3f")
    if isinstance(value, int | float):
        shown = format(value, spec)
        # A real difference of 1e-6 beside a small p must not read as none: a fixed-point
        # value that is not zero but rounds to it is shown in scientific notation instead.
        if value and _FIXED.match(spec) and not shown.strip("-0.%"):
            return f"{value:.1e}"
        return shown
    return str(value)


#: A fixed-point format spec (``.3f``; a percentage keeps its own format).
_FIXED = re.compile(r"^\.\d+f$")


#: A p-value's column or key: ``p``, ``p_value``, ``p_adjusted``, ``sign_p``...
_P_KEY = re.compile(r"^(p|p_[a-z_]+|[a-z_]+_p|[a-z_]*p_value)$")


def number_spec(column: str) -> str:
    """The format of a generic table's number column: ``p`` for a p-value's, else ``.3f``."""
    return "p" if _P_KEY.match(column) else ".3f"


def format_p(value: float | None) -> str:
    """A p-value as a sentence or a cell prints it after ``p``: ``= 0.123``, ``< 0.001``
    rather than a misleading ``= 0.000``, ``= -`` when there is none. The one formatter of
    every p written into text."""
    cell = fmt(value, "p")
    return cell if cell.startswith("<") else f"= {cell}"


def from_paper(source: str | None, paper: str) -> bool:
    """Whether the study's ``source`` names ``paper`` (a built-in seed study, or one that
    extends it): only then do its captions use that paper's words."""
    return paper in (source or "")


def cite(source: str | None, paper: str, where: str) -> str:
    """`` (paper, where)`` when the study's ``source`` names ``paper``, else empty: a user's
    own study is not that paper's figure."""
    return f" ({paper}, {where})" if from_paper(source, paper) else ""


@dataclass(frozen=True)
class Column:
    """One column of a table drawn from summary records.

    Attributes:
        key: Record key.
        label: Header (the key when absent).
        spec: Format (see :func:`fmt`); ``ci`` draws ``[key, upper]``.
        upper: For ``ci``: the key of the upper bound.
        star: Record key of a boolean that adds ``*`` (significance) after the value.
        description: What the value is, one line (the summary's JSON Schema says it).
        required: Whether every record has it (the schema requires it); an optional column
            is shown only when the records hold it.
    """

    key: str
    label: str | None = None
    spec: str = "text"
    upper: str | None = None
    star: str | None = None
    description: str = ""
    required: bool = True


#: A path into the summary: keys and list indices.
Path = tuple[str | int, ...]


def _parts(key: str | Path) -> Path:
    return (key,) if isinstance(key, str) else tuple(key)


def _number(path: Path, value: Any, spec: str) -> str:
    raw = "" if value is None else str(value)
    return (
        f'<span data-path="{html.escape(json.dumps(list(path)))}" '
        f'data-value="{html.escape(raw)}">'
        f"{html.escape(fmt(value, spec))}</span>"
    )


@dataclass
class HtmlSection:
    """The HTML of one part of the report, written by a kind from its summary.

    Attributes:
        title: Section heading.
        path: Path of the summary this section renders in summary.json (``("analyses", 0)``).
        figures: Figure name -> PNG bytes, available to :meth:`figure`.
        source: The study's ``source`` (the paper it reproduces), for :meth:`cite`.
    """

    title: str
    path: Path = ()
    figures: dict[str, bytes] = field(default_factory=dict)
    source: str = ""
    parts: list[str] = field(default_factory=list)
    #: Figures drawn so far (the page adds those a kind did not draw).
    shown: set[str] = field(default_factory=set)

    def cite(self, paper: str, where: str) -> str:
        """:func:`cite` for this section's study."""
        return cite(self.source, paper, where)

    def from_paper(self, paper: str) -> bool:
        """:func:`from_paper` for this section's study."""
        return from_paper(self.source, paper)

    def heading(self, text: str) -> None:
        """A sub-heading."""
        self.parts.append(f"<h3>{html.escape(text)}</h3>")

    def paragraph(self, text: str, *, muted: bool = False) -> None:
        """A paragraph of plain text."""
        cls = ' class="muted"' if muted else ""
        self.parts.append(f"<p{cls}>{html.escape(text)}</p>")

    def number(self, key: str | Path, value: Any, spec: str = ".3f") -> str:
        """Inline HTML for one summary value at ``path + key`` (for :meth:`raw`)."""
        return _number((*self.path, *_parts(key)), value, spec)

    def raw(self, markup: str) -> None:
        """Markup built with :meth:`number` and escaped text."""
        self.parts.append(markup)

    def table(
        self,
        records: Sequence[dict[str, Any]],
        *,
        key: str | Path,
        columns: Sequence[Column] | None = None,
        title: str | None = None,
        note: str | None = None,
        where: Iterable[int] | None = None,
    ) -> None:
        """A table of ``records`` (the summary list at ``<path>.<key>``).

        Args:
            records: The records.
            key: Their key in the summary (a tuple of parts for nested lists).
            columns: Columns to show (default: every key of the first record).
            title: Caption.
            note: A line under the table explaining its columns.
            where: Indices of the records to show (default: all).
        """
        if columns is None:
            first = records[0] if records else {}
            columns = [
                Column(k, spec=number_spec(k) if isinstance(v, float) else "text")
                for k, v in first.items()
            ]
        base = (*self.path, *_parts(key))
        head = "".join(
            f'<th class="{"t" if c.spec == "text" else ""}">{html.escape(c.label or c.key)}</th>'
            for c in columns
        )
        body = []
        for i in where if where is not None else range(len(records)):
            record = records[i]
            cells = []
            for c in columns:
                value = record.get(c.key)
                if c.spec == "text":
                    cell = html.escape(fmt(value, "text"))
                    cells.append(f'<td class="t">{cell}</td>')
                    continue
                if c.spec == "ci":
                    cell = (
                        f"[{_number((*base, i, c.key), value, '.3f')}, "
                        f"{_number((*base, i, c.upper or ''), record.get(c.upper or ''), '.3f')}]"
                    )
                else:
                    cell = _number((*base, i, c.key), value, c.spec)
                if c.star and record.get(c.star):
                    cell += '<span class="sig">*</span>'
                cells.append(f"<td>{cell}</td>")
            body.append("<tr>" + "".join(cells) + "</tr>")
        caption = f"<caption>{html.escape(title)}</caption>" if title else ""
        self.parts.append(
            f'<div class="scroll"><table>{caption}<thead><tr>{head}</tr></thead>'
            f"<tbody>{''.join(body)}</tbody></table></div>"
        )
        if note:
            self.paragraph(note, muted=True)

    def figure(self, name: str, caption: str) -> None:
        """The figure ``name`` (a PNG the run wrote) with a caption; nothing when absent."""
        png = self.figures.get(name)
        if png is None:
            return
        self.shown.add(name)
        data = base64.b64encode(png).decode("ascii")
        self.parts.append(
            f'<figure><img alt="{html.escape(caption)}" src="data:image/png;base64,{data}">'
            f"<figcaption>{html.escape(caption)} ({html.escape(name)}.png)</figcaption></figure>"
        )

    def render(self, anchor: str) -> str:
        """The section's HTML."""
        return (
            f'<section id="{html.escape(anchor)}"><h2>{html.escape(self.title)}</h2>'
            + "".join(self.parts)
            + "</section>"
        )


def page(title: str, head: str, sections: Sequence[tuple[str, HtmlSection]]) -> str:
    """The whole document: ``head`` (trusted markup) then each ``(anchor, section)``."""
    nav = "".join(
        f'<a href="#{html.escape(anchor)}">{html.escape(s.title)}</a>' for anchor, s in sections
    )
    stamp = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{html.escape(title)}</title><style>{_CSS}</style></head><body><main>"
        f"{head}<nav>{nav}</nav>"
        + "".join(s.render(anchor) for anchor, s in sections)
        + f'<p class="muted">Written by biasim on {stamp}.</p></main></body></html>'
    )
