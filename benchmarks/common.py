"""Shared timing and reporting helpers for benchmarks/run.py and every workload.

A workload is a module in benchmarks/workloads/ with ``NAME``, ``DESCRIPTION`` and
``run(ctx)``. It measures kqlite and its peers on the same data in the same run and
records each figure with :meth:`Context.add`. This module owns everything else:
sizes per mode, scratch directories, timing, optional peers, the printed table,
the JSON file and the chart.

Every figure is a rate (unit ``rec/s``, ``B/s``, ``ops/s``; higher is better) or a
duration (unit ``s``; lower is better). Within one *case* (same data, same job) one
row is the reference, normally kqlite; the "ref ×" column says how many times better
the reference is than that row (> 1: kqlite wins).
"""

import contextlib
import datetime
import importlib
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

__all__ = ["Context", "Result", "optional", "settle", "timed_loop", "best_time",
           "values", "fmt_value", "print_table", "write_json", "write_chart",
           "evaluate_targets"]

HIGHER_IS_BETTER = {"rec/s", "B/s", "ops/s"}


# -- Data -------------------------------------------------------------------------------------

def values(size, count=10_000, seed=1):
    """``count`` distinct pseudo-random values of ``size`` bytes (the same in every run).

    Every system is fed from this pool, cycling through it, so all see the same bytes.
    Random bytes do not compress, which keeps page-cache comparisons honest.
    """
    import random
    rnd = random.Random(seed * 1_000_003 + size)
    return [rnd.randbytes(size) for _ in range(count)]


# -- Timing -----------------------------------------------------------------------------------

def settle():
    """Write back dirty pages so that one measurement does not pay for the last one's."""
    if hasattr(os, "sync"):
        os.sync()


def best_time(repeats, run, setup=None, teardown=None, sync=True, limit=None):
    """Best wall time of ``run(state)`` over ``repeats`` tries.

    ``setup()`` (untimed) makes the state for one try, ``teardown(state)`` cleans up.
    With ``sync`` the page cache is written back before each try. No new try starts
    once the tries so far took ``limit`` seconds (slow peers run once).
    """
    best = None
    spent = 0.0
    for _ in range(max(1, repeats)):
        if limit is not None and spent >= limit:
            break
        state = setup() if setup else None
        if sync:
            settle()
        started = time.perf_counter()
        run(state)
        elapsed = time.perf_counter() - started
        spent += elapsed
        if teardown:
            teardown(state)
        best = elapsed if best is None else min(best, elapsed)
    return best


def pread_file(path, each=None, chunk=1 << 20):
    """Read a whole file in ``chunk``-byte preads, handing each piece to ``each``."""
    fd = os.open(path, os.O_RDONLY)
    try:
        pos = 0
        while True:
            data = os.pread(fd, chunk, pos)
            if not data:
                return pos
            if each is not None:
                each(data)
            pos += len(data)
    finally:
        os.close(fd)


def timed_loop(step, budget, max_steps=None):
    """Call ``step()`` until ``budget`` seconds pass (or ``max_steps`` calls).

    Returns ``(steps, seconds)``; used for slow peers so that each gets about the
    same wall time instead of the same record count.
    """
    steps = 0
    started = time.perf_counter()
    deadline = started + budget
    now = started
    while now < deadline and (max_steps is None or steps < max_steps):
        step()
        steps += 1
        now = time.perf_counter()
    return steps, now - started


def optional(module):
    """Import a peer library, or None when it is not installed."""
    try:
        return importlib.import_module(module)
    except ImportError:
        return None


# -- The run context --------------------------------------------------------------------------

class Result(dict):
    """One figure: workload, case, system, value, unit, n, seconds, note, ref."""

    @property
    def key(self):
        return f"{self['workload']}/{self['case']}/{self['system']}"


class Context:
    """What a workload gets: the mode's sizes, scratch space, and where to put figures."""

    def __init__(self, mode="default", work_root=None, verbose=True, stream=None):
        if mode not in ("quick", "default", "full"):
            raise ValueError(f"unknown mode {mode!r}")
        self.mode = mode
        self.verbose = verbose
        self.stream = stream or sys.stdout
        self.results = []
        self.skipped = []
        self.errors = []
        self.workload = None
        self._own_root = work_root is None
        self.work_root = work_root or tempfile.mkdtemp(prefix="kqlite-bench-")
        os.makedirs(self.work_root, exist_ok=True)
        self.started = time.perf_counter()

    def pick(self, quick, default, full=None):
        """The size for this mode."""
        return {"quick": quick, "default": default,
                "full": default if full is None else full}[self.mode]

    @property
    def repeats(self):
        return self.pick(1, 3, 3)

    @property
    def limit(self):
        """Seconds of tries after which best_time stops repeating."""
        return self.pick(0.5, 3.0, 8.0)

    @property
    def budget(self):
        """Seconds a time-boxed (slow) measurement runs for."""
        return self.pick(0.1, 1.0, 2.0)

    def log(self, message):
        if self.verbose:
            elapsed = time.perf_counter() - self.started
            print(f"[{elapsed:7.1f}s] {message}", file=self.stream, flush=True)

    @contextlib.contextmanager
    def workdir(self, name):
        """A fresh directory under the scratch root, removed afterwards."""
        path = os.path.join(self.work_root, f"{self.workload or 'bench'}-{name}")
        shutil.rmtree(path, ignore_errors=True)
        os.makedirs(path)
        try:
            yield path
        finally:
            shutil.rmtree(path, ignore_errors=True)

    def add(self, case, system, value, unit, *, n=None, seconds=None, note="", ref=None):
        """Record a figure. ``ref`` marks the case's reference row (default: the first
        row whose system starts with "kqlite")."""
        if ref is None:
            ref = system.startswith("kqlite") and not any(
                r["ref"] for r in self.results
                if r["workload"] == self.workload and r["case"] == case)
        result = Result(workload=self.workload, case=case, system=system, value=float(value),
                        unit=unit, n=n, seconds=seconds, note=note, ref=bool(ref))
        self.results.append(result)
        self.log(f"  {case:<26} {system:<30} {fmt_value(value, unit):>14}"
                 + (f"  ({note})" if note else ""))
        return result

    def add_rate(self, case, system, count, seconds, unit="rec/s", **kw):
        return self.add(case, system, count / seconds if seconds > 0 else float("inf"), unit,
                        n=count, seconds=seconds, **kw)

    def skip(self, case, system, reason):
        self.skipped.append({"workload": self.workload, "case": case, "system": system,
                             "reason": reason})
        self.log(f"  {case:<26} {system:<30} skipped: {reason}")

    def peer(self, module, case, system):
        """Import a peer library or record that it was skipped."""
        mod = optional(module)
        if mod is None:
            self.skip(case, system, f"{module} not installed (pip install -e '.[bench]')")
        return mod

    def get(self, workload, case, system):
        for r in self.results:
            if (r["workload"], r["case"], r["system"]) == (workload, case, system):
                return r
        return None

    def close(self):
        if self._own_root:
            shutil.rmtree(self.work_root, ignore_errors=True)


def drain_socket(port, total, ready, rcvbuf=None):
    """Connect to ``port`` on loopback and read ``total`` bytes (or until the sender
    closes), setting ``ready`` once connected: the receiving end of a loopback limit
    measurement, run in a child process. ``rcvbuf``: SO_RCVBUF to ask for."""
    s = socket.create_connection(("127.0.0.1", port))
    if rcvbuf is not None:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    view = memoryview(bytearray(1 << 20))
    ready.set()
    left = total
    while left:
        n = s.recv_into(view)
        if not n:
            break
        left -= n
    s.close()


def stop_process(proc, timeout=30):
    """SIGTERM a broker the benchmark started, SIGKILL it if it is not gone in
    ``timeout`` seconds."""
    proc.terminate()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()


def run_threads(count, target):
    """Start ``count`` threads running ``target(i)`` at the same moment; join them."""
    barrier = threading.Barrier(count)
    errors = []

    def body(i):
        barrier.wait()
        try:
            target(i)
        except BaseException as exc:  # surfaced after join
            errors.append(exc)

    threads = [threading.Thread(target=body, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


# -- Formatting -------------------------------------------------------------------------------

def fmt_value(value, unit):
    if value == float("inf"):
        return "inf"
    if unit == "s":
        if value < 1e-3:
            return f"{value * 1e6:.1f} us"
        if value < 1:
            return f"{value * 1e3:.1f} ms"
        return f"{value:.2f} s"
    if unit == "B/s":
        for scale, name in ((1e9, "GB/s"), (1e6, "MB/s"), (1e3, "kB/s")):
            if value >= scale:
                return f"{value / scale:.2f} {name}"
        return f"{value:.0f} B/s"
    for scale, name in ((1e6, "M"), (1e3, "k")):
        if value >= scale:
            return f"{value / scale:.2f} {name} {unit}"
    return f"{value:.1f} {unit}"


def better_ratio(a, b):
    """How many times better figure ``a`` is than ``b``; None when the units differ."""
    if a["unit"] != b["unit"]:
        return None
    if a["unit"] in HIGHER_IS_BETTER:
        return a["value"] / b["value"] if b["value"] else float("inf")
    return b["value"] / a["value"] if a["value"] else float("inf")


def _cases(results):
    order, groups = [], {}
    for r in results:
        key = (r["workload"], r["case"])
        if key not in groups:
            order.append(key)
            groups[key] = []
        groups[key].append(r)
    return order, groups


def reference_of(rows):
    for r in rows:
        if r["ref"]:
            return r
    return None


def evaluate_targets(results, targets):
    """Compute each target's ratio from ``results``; returns a list of dicts."""
    index = {(r["workload"], r["case"], r["system"]): r for r in results}
    out = []
    for t in targets:
        num = index.get(tuple(t["numerator"]))
        den = index.get(tuple(t["denominator"])) if t.get("denominator") else None
        entry = {k: t[k] for k in ("id", "description", "required")}
        entry["numerator"] = "/".join(t["numerator"])
        entry["denominator"] = "/".join(t["denominator"]) if t.get("denominator") else None
        if num is None or (t.get("denominator") and den is None):
            entry.update(ratio=None, status="n/a",
                         detail="not measured in this run (see --only / skipped peers)")
        else:
            if den is None and num["unit"] in HIGHER_IS_BETTER:   # absolute: value / scale
                ratio = num["value"] / t["scale"]
            elif den is None:     # absolute, a duration (lower is better): scale / value
                ratio = t["scale"] / num["value"] if num["value"] else float("inf")
            else:
                ratio = num["value"] / den["value"] if den["value"] else float("inf")
            entry.update(ratio=ratio, status="PASS" if ratio >= t["required"] else "MISS",
                         detail=f"{fmt_value(num['value'], num['unit'])} vs "
                                + (fmt_value(den["value"], den["unit"]) if den else
                                   fmt_value(t["scale"], num["unit"])))
        out.append(entry)
    return out


def print_table(results, targets, skipped, stream=sys.stdout, references=None):
    """The results table (absolute figures and ratios), then the targets table."""
    references = references or {}
    w = stream.write
    order, groups = _cases(results)
    line = "-" * 100
    w("\n" + line + "\n")
    w(f"{'workload / case':<34} {'system':<30} {'figure':>14} {'ref ×':>8}  {'issue ref':>11}\n")
    w(line + "\n")
    last = None
    for key in order:
        rows = groups[key]
        ref = reference_of(rows)
        label = f"{key[0]} / {key[1]}"
        if last is not None and last != key[0]:
            w("\n")
        last = key[0]
        for i, r in enumerate(rows):
            if ref is None:
                ratio = ""
            elif r is ref:
                ratio = "(ref)"
            else:
                ratio = better_ratio(ref, r)
                ratio = "" if ratio is None else f"{ratio:.2f}"
            issue = references.get((r["workload"], r["case"], r["system"]))
            issue = fmt_value(issue[0], issue[1]).rjust(11) if issue else ""
            w(f"{label if i == 0 else '':<34} {r['system']:<30} "
              f"{fmt_value(r['value'], r['unit']):>14} {ratio:>8}  {issue}\n")
    w(line + "\n")
    w("ref × = how many times better the case's reference row (kqlite) is than that row; "
      "'issue ref' = figure measured on the dev machine (2026-11-22)\n")
    if skipped:
        w("skipped: " + "; ".join(f"{s['workload']}/{s['case']}/{s['system']} ({s['reason']})"
                                  for s in skipped) + "\n")
    if targets:
        w("\n" + line + "\n")
        w(f"{'target':<62} {'ratio':>8} {'needs':>7}  {'status':<6} measured\n")
        w(line + "\n")
        for t in targets:
            ratio = "-" if t["ratio"] is None else f"{t['ratio']:.2f}"
            w(f"{t['description']:<62} {ratio:>8} {'>= ' + format(t['required'], 'g'):>7}  "
              f"{t['status']:<6} {t['detail']}\n")
        w(line + "\n")
        passed = sum(t["status"] == "PASS" for t in targets)
        missed = sum(t["status"] == "MISS" for t in targets)
        w(f"targets: {passed} PASS, {missed} MISS, {len(targets) - passed - missed} n/a\n")


def machine_info():
    info = {"python": sys.version.split()[0], "platform": platform.platform(),
            "machine": platform.machine(), "cpus": os.cpu_count()}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    info["cpu"] = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        import kqlite._native as native
        info["kqlite_native"] = native.IMPLEMENTATION
        if native.c is not None:
            info["hardware_crc32c"] = bool(getattr(native.c, "HARDWARE_CRC", False))
    except Exception:
        pass
    versions = {}
    for name in ("kqlite", "lmdb", "persist-queue", "litequeue", "diskcache", "crc32c",
                 "crcmod", "matplotlib"):
        try:
            from importlib.metadata import version
            versions[name] = version(name)
        except Exception:
            pass
    versions["sqlite3"] = __import__("sqlite3").sqlite_version
    info["versions"] = versions
    return info


def write_json(path, ctx, targets, extra=None):
    doc = {
        "generated": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "mode": ctx.mode,
        "machine": machine_info(),
        "results": [dict(r, key=r.key) for r in ctx.results],
        "targets": targets,
        "skipped": ctx.skipped,
        "errors": ctx.errors,
    }
    if extra:
        doc.update(extra)
    with open(path, "w") as f:
        json.dump(doc, f, indent=2, sort_keys=False)
        f.write("\n")
    return doc


def write_chart(path, results, targets):
    """A PNG: target ratios against their thresholds, and every case relative to its
    reference. Returns False (and writes nothing) when matplotlib is missing."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    order, groups = _cases(results)
    rows = []   # (label, ratio of this row vs its reference: > 1 means the row is better)
    for key in order:
        ref = reference_of(groups[key])
        if ref is None:
            continue
        for r in groups[key]:
            ratio = None if r is ref else better_ratio(r, ref)
            if ratio is not None:
                rows.append((f"{key[1]}: {r['system'][:38]}", ratio))
    measured = [t for t in targets if t["ratio"] is not None]
    height = 2 + 0.28 * len(rows) + 0.4 * len(measured)
    fig, axes = plt.subplots(2, 1, figsize=(11, max(6, height)),
                             gridspec_kw={"height_ratios": [max(1, len(measured)),
                                                            max(1, len(rows)) * 0.7]})
    ax = axes[0]
    if measured:
        names = [t["id"] for t in measured]
        ratios = [t["ratio"] for t in measured]
        need = [t["required"] for t in measured]
        colors = ["tab:green" if t["status"] == "PASS" else "tab:red" for t in measured]
        y = range(len(measured))
        ax.barh(list(y), ratios, color=colors)
        ax.scatter(need, list(y), marker="|", s=400, color="black", label="required", zorder=3)
        ax.set_yticks(list(y))
        ax.set_yticklabels(names, fontsize=8)
        ax.invert_yaxis()
        ax.set_xscale("log")
        ax.legend(loc="lower right", fontsize=8)
        for i, r in enumerate(ratios):
            ax.text(r, i, f" {r:.2f}", va="center", fontsize=7)
    ax.set_title("kqlite targets: measured ratio (green PASS, red MISS; bar = required)")
    ax = axes[1]
    if rows:
        y = range(len(rows))
        ratios = [max(r, 1e-4) for _, r in rows]
        ax.barh(list(y), ratios, color=["tab:orange" if r >= 1 else "tab:blue" for r in ratios])
        ax.axvline(1.0, color="black", linewidth=0.8)
        ax.set_yticks(list(y))
        ax.set_yticklabels([label for label, _ in rows], fontsize=6)
        ax.invert_yaxis()
        ax.set_xscale("log")
    ax.set_title("each peer ÷ kqlite in the same case (blue < 1: kqlite faster; "
                 "orange > 1: the peer is faster)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True
