"""Line charts as inline SVG, drawn on the server: no charting library, no network.

Theory of operation. :func:`line_chart` maps each series' ``(time, value)`` points onto
a fixed viewBox: time runs from the earliest to the latest point of all series, values
from 0 to the largest (so a lag of zero sits on the axis). Each series is one
``<polyline>`` in its colour, listed in a legend with its last value; the axes carry the
maximum and the time span. Names are escaped. A chart with no points says so instead of
drawing empty axes. The page's script (static/console.js) only swaps a chart for a newer
one from the server; the SVG is complete without it.
"""

import html
from typing import Any

__all__ = ["line_chart"]

WIDTH, HEIGHT = 640, 200
_LEFT, _RIGHT, _TOP, _BOTTOM = 56, 8, 8, 24
_COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2",
            "#7f7f7f")
MAX_LINES = len(_COLOURS)


def _number(value: float) -> str:
    if value >= 1e6:
        return f"{value / 1e6:.1f}M"
    if value >= 1e4:
        return f"{value / 1e3:.0f}k"
    return f"{value:.0f}" if value == int(value) else f"{value:.1f}"


def line_chart(title: str, series: dict[Any, Any], unit: str = "") -> str:
    """An ``<svg>`` of up to MAX_LINES series ``{name: [(time s, value)]}``."""
    shown = [(name, points) for name, points in sorted(series.items()) if points][:MAX_LINES]
    label = html.escape(title)
    head = (f'<svg class="chart" role="img" aria-label="{label}" viewBox="0 0 {WIDTH} '
            f'{HEIGHT + 16 * max(1, len(shown))}" xmlns="http://www.w3.org/2000/svg">'
            f'<title>{label}</title>')
    if not shown:
        return head + (f'<text x="{_LEFT}" y="{HEIGHT // 2}" class="empty">no samples yet'
                       f'</text></svg>')
    times = [t for _, points in shown for t, _v in points]
    t0, t1 = min(times), max(times)
    top = max(v for _, points in shown for _t, v in points) or 1.0
    plot_w, plot_h = WIDTH - _LEFT - _RIGHT, HEIGHT - _TOP - _BOTTOM
    span = (t1 - t0) or 1.0
    parts = [head,
             f'<line x1="{_LEFT}" y1="{_TOP + plot_h}" x2="{WIDTH - _RIGHT}" '
             f'y2="{_TOP + plot_h}" stroke="#999"/>',
             f'<line x1="{_LEFT}" y1="{_TOP}" x2="{_LEFT}" y2="{_TOP + plot_h}" stroke="#999"/>',
             f'<text x="{_LEFT - 4}" y="{_TOP + 10}" text-anchor="end">'
             f'{_number(top)}</text>',
             f'<text x="{_LEFT - 4}" y="{_TOP + plot_h}" text-anchor="end">0</text>',
             f'<text x="{WIDTH - _RIGHT}" y="{HEIGHT - 6}" text-anchor="end">now</text>',
             f'<text x="{_LEFT}" y="{HEIGHT - 6}">-{_number(t1 - t0)}s</text>']
    for i, (name, points) in enumerate(shown):
        colour = _COLOURS[i]
        coords = " ".join(f"{_LEFT + (t - t0) / span * plot_w:.1f},"
                          f"{_TOP + plot_h - v / top * plot_h:.1f}" for t, v in points)
        parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" '
                     f'points="{coords}" data-series="{html.escape(name)}"/>')
        y = HEIGHT + 12 + 16 * i
        parts.append(f'<rect x="{_LEFT}" y="{y - 9}" width="10" height="10" '
                     f'fill="{colour}"/><text x="{_LEFT + 14}" y="{y}" class="legend">'
                     f'{html.escape(name)}: {_number(points[-1][1])}{html.escape(unit)}'
                     f'</text>')
    parts.append("</svg>")
    return "".join(parts)
