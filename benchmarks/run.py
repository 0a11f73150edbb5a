#!/usr/bin/env python3
"""Measure kqlite against its peers, on the same data in the same run.

    python benchmarks/run.py                 # default sizes: a few minutes on 2 cores
    python benchmarks/run.py --full          # larger runs (1 GiB recovery, ...)
    python benchmarks/run.py --quick         # tiny sizes, for the smoke test
    python benchmarks/run.py --only append --only read
    python benchmarks/run.py --out /tmp/results

Prints a table of absolute figures and ratios and the issue's targets with
PASS/MISS, and writes results.json and results.png into --out (default
benchmarks/results/). Peers that are not installed are skipped; install them
with ``pip install -e '.[bench]'``. See docs/benchmarks.md.
"""

import argparse
import os
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)
ROOT = os.path.dirname(HERE)
if ROOT not in sys.path:
    sys.path.insert(1, ROOT)   # run from a checkout without installing

import common  # noqa: E402
import targets as target_defs  # noqa: E402
from workloads import WORKLOADS  # noqa: E402


def parse_args(argv):
    names = [w.NAME for w in WORKLOADS]
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="workloads: " + ", ".join(names))
    size = p.add_mutually_exclusive_group()
    size.add_argument("--full", action="store_true", help="larger sizes (several minutes more)")
    size.add_argument("--quick", action="store_true", help="tiny sizes (seconds; smoke test)")
    p.add_argument("--only", action="append", metavar="NAME",
                   help="run only this workload (repeatable or comma-separated): "
                        + ", ".join(names))
    p.add_argument("--out", default=os.path.join(HERE, "results"),
                   help="directory for results.json and results.png (default: %(default)s)")
    p.add_argument("--workdir", default=None,
                   help="scratch directory for the logs and databases (default: a temp dir "
                        "on the same disk as /tmp)")
    p.add_argument("--list", action="store_true", help="list the workloads and exit")
    args = p.parse_args(argv)
    if args.only:
        wanted = [n.strip() for item in args.only for n in item.split(",") if n.strip()]
        unknown = [n for n in wanted if n not in names]
        if unknown:
            p.error(f"unknown workload(s) {', '.join(unknown)}; choose from {', '.join(names)}")
        args.only = wanted
    return args


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.list:
        for w in WORKLOADS:
            print(f"{w.NAME:<13} {w.DESCRIPTION}")
        return 0
    mode = "full" if args.full else "quick" if args.quick else "default"
    selected = [w for w in WORKLOADS if not args.only or w.NAME in args.only]
    ctx = common.Context(mode, work_root=args.workdir)
    import kqlite._native as native
    ctx.log(f"kqlite benchmarks, mode {mode}, C helpers: {native.IMPLEMENTATION}, "
            f"scratch {ctx.work_root}")
    try:
        for w in selected:
            ctx.workload = w.NAME
            ctx.log(f"== {w.NAME}: {w.DESCRIPTION} ...")
            started = time.perf_counter()
            try:
                w.run(ctx)
            except KeyboardInterrupt:
                raise
            except Exception as exc:
                ctx.errors.append({"workload": w.NAME, "error": repr(exc),
                                   "traceback": traceback.format_exc()})
                ctx.log(f"!! {w.NAME} failed: {exc!r}")
                traceback.print_exc()
            ctx.log(f"== {w.NAME} done in {time.perf_counter() - started:.1f} s")
    finally:
        ctx.close()
    targets = common.evaluate_targets(ctx.results, target_defs.TARGETS)
    common.print_table(ctx.results, targets, ctx.skipped, references=target_defs.ISSUE_REFERENCES)
    os.makedirs(args.out, exist_ok=True)
    json_path = os.path.join(args.out, "results.json")
    common.write_json(json_path, ctx, targets, extra={
        "workloads": [w.NAME for w in selected],
        "elapsed_seconds": round(time.perf_counter() - ctx.started, 2)})
    png_path = os.path.join(args.out, "results.png")
    if common.write_chart(png_path, ctx.results, targets):
        print(f"wrote {json_path} and {png_path}")
    else:
        print(f"wrote {json_path} (no chart: matplotlib is not installed)")
    print(f"total {time.perf_counter() - ctx.started:.1f} s")
    return 1 if ctx.errors else 0


if __name__ == "__main__":
    sys.exit(main())
