"""The GPU benchmark's chart: seconds per epoch as grouped horizontal bars.

Hand-written SVG (no matplotlib, which the GPU machine may lack): one group
of bars per batch size, one bar per framework and mode, the value printed on
each bar, and each batch's target (a fraction of PyTorch's CUDA-graph time)
drawn as a dashed line across its group. The times span two orders of
magnitude (PyTorch eager at batch 100 against graphs at batch 1000), so the
scale turns logarithmic when the largest bar is more than LOG_SCALE_SPREAD
times the smallest; otherwise linear bars from zero are easier to compare.

Used by bench/gpu_vs_pytorch.py; `render_svg` takes its run summaries.
"""

import math
from xml.sax.saxutils import escape

# Greens for bumpgrad, oranges for PyTorch; darker = more aggressive mode.
COLOURS = {
    "bumpgrad-graph": "#1b7837",
    "bumpgrad-nograph": "#7fbf7b",
    "pytorch-eager": "#fdb863",
    "pytorch-benchmark": "#e08214",
    "pytorch-graph": "#b35806",
}
FALLBACK_COLOUR = "#888888"
TARGET_COLOUR = "#c51b7d"

LOG_SCALE_SPREAD = 8.0

WIDTH = 980
LABEL_RIGHT = 200     # labels are right-aligned against this x
BAR_LEFT = 212
BAR_RIGHT = 860       # values may spill to the right of the longest bar
TITLE_HEIGHT = 70
GROUP_HEADING = 26
ROW = 24
BAR_HEIGHT = 17
GROUP_GAP = 16
AXIS_HEIGHT = 40
FOOTER_HEIGHT = 34


class Scale:
    """Maps seconds to x, linear from zero or logarithmic between decades."""

    def __init__(self, values):
        lo, hi = min(values), max(values)
        self.log = hi / lo > LOG_SCALE_SPREAD
        if self.log:
            # A decade boundary at least 2x below the shortest bar, so it shows.
            self.lo = 10.0 ** math.floor(math.log10(lo / 2))
            # Room for the value printed after the longest bar.
            self.hi = nice_ceiling(hi * 1.15, (1, 2, 5, 10))
        else:
            self.lo = 0.0
            self.hi = nice_ceiling(hi * 1.08)

    def x(self, value):
        if self.log:
            frac = (math.log10(value) - math.log10(self.lo)) / (
                math.log10(self.hi) - math.log10(self.lo))
        else:
            frac = (value - self.lo) / (self.hi - self.lo)
        return BAR_LEFT + max(0.0, min(1.0, frac)) * (BAR_RIGHT - BAR_LEFT)

    def ticks(self):
        """1-2-5 ticks per decade on a log scale, five or so steps linearly."""
        if self.log:
            ticks, decade = [], self.lo
            while decade <= self.hi * 1.0001:
                ticks += [decade * m for m in (1, 2, 5) if decade * m <= self.hi * 1.0001]
                decade *= 10
            return ticks
        step = nice_ceiling(self.hi / 5)
        return [i * step for i in range(int(self.hi / step + 1e-9) + 1)]


def nice_ceiling(value, multiples=(1, 2, 2.5, 5, 10)):
    """The smallest of `multiples` times a power of ten that is >= value."""
    exponent = math.floor(math.log10(value))
    for m in multiples:
        if m * 10 ** exponent >= value * (1 - 1e-9):
            return m * 10 ** exponent
    return 10 ** (exponent + 1)


def format_seconds(value):
    """Three significant digits: 1.09 s, 0.139 s, 0.0384 s."""
    return f"{value:#.3g} s"


def text(x, y, content, size=12, anchor="start", weight="normal", fill="#222",
         style=""):
    """One SVG <text> element, its content escaped."""
    extra = f' font-style="{style}"' if style else ""
    return (f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}" '
            f'font-weight="{weight}" fill="{fill}"{extra}>{escape(content)}</text>')


def bar_row(run, y, scale):
    """The label, bar and value of one run; failed runs say so instead."""
    parts = [text(LABEL_RIGHT, y + BAR_HEIGHT - 4, run["label"], anchor="end")]
    seconds = run.get("seconds_per_epoch")
    if run["status"] != "ok" or seconds is None:
        parts.append(text(BAR_LEFT + 4, y + BAR_HEIGHT - 4,
                          f"failed ({run.get('failure', 'no result')})",
                          fill="#999", style="italic"))
        return parts
    end = scale.x(seconds)
    colour = COLOURS.get(run["key"], FALLBACK_COLOUR)
    parts.append(f'<rect x="{BAR_LEFT}" y="{y:.1f}" width="{max(end - BAR_LEFT, 1.5):.1f}" '
                 f'height="{BAR_HEIGHT}" fill="{colour}" rx="2"/>')
    parts.append(text(end + 5, y + BAR_HEIGHT - 4, format_seconds(seconds),
                      weight="bold" if run["key"] == "bumpgrad-graph" else "normal"))
    return parts


def target_line(target, top, bottom, scale):
    """A dashed line at the batch's target time, labelled in its heading row."""
    x = scale.x(target["limit_seconds"])
    label = (f"target ≤ {target['factor']:g}× PyTorch graph = "
             f"{format_seconds(target['limit_seconds'])}")
    if target.get("met") is not None:
        label += (f": {'met' if target['met'] else 'not met'} "
                  f"({target['ratio']:.2f}×)")
    # Keep the label inside the picture: right-aligned when near the edge.
    anchor, dx = ("end", -4) if x > WIDTH - 260 else ("start", 4)
    return [
        f'<line x1="{x:.1f}" y1="{top:.1f}" x2="{x:.1f}" y2="{bottom:.1f}" '
        f'stroke="{TARGET_COLOUR}" stroke-width="1.5" stroke-dasharray="5,3"/>',
        text(x + dx, top + 12, label, size=11, anchor=anchor, fill=TARGET_COLOUR),
    ]


def axis(scale, top, bottom):
    """Grid lines over all groups and tick labels under the last one."""
    parts = []
    for tick in scale.ticks():
        x = scale.x(tick)
        parts.append(f'<line x1="{x:.1f}" y1="{top:.1f}" x2="{x:.1f}" y2="{bottom:.1f}" '
                     'stroke="#e3e3e3" stroke-width="1"/>')
        parts.append(text(x, bottom + 16, f"{tick:g}", size=11, anchor="middle", fill="#555"))
    parts.append(text((BAR_LEFT + BAR_RIGHT) / 2, bottom + 33,
                      "seconds per epoch" + (" (log scale)" if scale.log else ""),
                      size=12, anchor="middle", fill="#555"))
    return parts


def render_svg(runs, targets, title, subtitle, footer):
    """The whole chart as an SVG document (a string).

    runs: summaries in display order, each with key, label, batch, status,
    seconds_per_epoch (None when failed) and failure; targets: per batch
    with batch, factor and limit_seconds (absent when unmeasurable).
    """
    batches = sorted({r["batch"] for r in runs})
    values = [r["seconds_per_epoch"] for r in runs
              if r["status"] == "ok" and r.get("seconds_per_epoch")]
    values += [t["limit_seconds"] for t in targets if t.get("limit_seconds")]
    scale = Scale(values or [0.1, 1.0])
    targets_by_batch = {t["batch"]: t for t in targets if t.get("limit_seconds")}

    groups, y = [], TITLE_HEIGHT
    for batch in batches:
        members = [r for r in runs if r["batch"] == batch]
        steps = next((r["steps"] for r in members if r.get("steps")), None)
        heading = f"batch {batch}" + (f" ({steps} steps per epoch)" if steps else "")
        part = [text(12, y + 17, heading, size=13, weight="bold")]
        top = y
        y += GROUP_HEADING
        for run in members:
            part += bar_row(run, y, scale)
            y += ROW
        if batch in targets_by_batch:
            part += target_line(targets_by_batch[batch], top, y - ROW + BAR_HEIGHT + 4, scale)
        groups.append(part)
        y += GROUP_GAP
    grid_bottom = y - GROUP_GAP + 4
    height = grid_bottom + AXIS_HEIGHT + FOOTER_HEIGHT

    svg = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height:.0f}" '
        f'viewBox="0 0 {WIDTH} {height:.0f}" font-family="Helvetica, Arial, sans-serif">',
        f'<rect width="{WIDTH}" height="{height:.0f}" fill="white"/>',
        text(12, 26, title, size=17, weight="bold"),
        text(12, 48, subtitle, size=12, fill="#555"),
    ]
    svg += axis(scale, TITLE_HEIGHT - 4, grid_bottom)
    for part in groups:
        svg += part
    svg.append(text(12, height - 12, footer, size=11, fill="#777"))
    svg.append("</svg>")
    return "\n".join(svg) + "\n"
