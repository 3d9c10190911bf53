"""What a figure's reader loses to the canvas edge: the titles, legends and figure-level texts
(banner, notes) whose boxes reach past the canvas once drawn at the figure's own size."""

from __future__ import annotations

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

#: Pixels a box may touch past the edge (anti-aliasing rounds outwards).
SLACK_PX = 1.0


def clipped(fig: Figure) -> list[str]:
    """``kind: text`` of each title, legend or figure text not wholly inside the canvas."""
    FigureCanvasAgg(fig).draw()
    canvas = fig.bbox
    boxes = []
    if fig._suptitle is not None and fig._suptitle.get_text():
        boxes.append(("suptitle", fig._suptitle.get_text(), fig._suptitle))
    boxes += [("text", t.get_text(), t) for t in fig.texts if t.get_text()]
    for ax in fig.axes:
        boxes += [("title", t.get_text(), t) for t in (ax.title, ax._left_title, ax._right_title)]
        if ax.get_legend() is not None:
            boxes.append(("legend", "axes legend", ax.get_legend()))
    boxes += [("legend", "figure legend", legend) for legend in fig.legends]
    out = []
    for kind, text, artist in boxes:
        if kind == "title" and not text:
            continue
        box = artist.get_window_extent()
        inside = (
            box.x0 >= canvas.x0 - SLACK_PX
            and box.y0 >= canvas.y0 - SLACK_PX
            and box.x1 <= canvas.x1 + SLACK_PX
            and box.y1 <= canvas.y1 + SLACK_PX
        )
        if not inside:
            out.append(f"{kind}: {text!r} at {box.bounds} outside {canvas.bounds}")
    return out
