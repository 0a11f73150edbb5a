"""The C helpers against their pure-Python twins (encode, decode, scan), and CRC-32C
throughput: kqlite's C helper against crcmod (the pure path's CRC) and the
``crc32c`` package."""

import os

from common import timed_loop, values

NAME = "native"
DESCRIPTION = "C helpers vs pure-Python twins; CRC-32C C vs crcmod vs crc32c package"


def _rate(ctx, case, system, fn, units_per_call, unit, note=""):
    fn()  # warm up
    best = 0.0
    for _ in range(ctx.repeats):
        n, t = timed_loop(fn, ctx.budget / 2)
        best = max(best, n * units_per_call / t)
    return ctx.add(case, system, best, unit, note=note)


def run(ctx):
    import kqlite._native as native
    from kqlite.format.batch import build_batch

    impls = [("kqlite C", native.c), ("kqlite pure-Python", native.pure)]
    if native.c is None:
        ctx.skip("encode_1000x100B", "kqlite C", "C helpers not built")
        impls = impls[1:]
    vals = values(100, 1000)
    count = len(vals)
    body = native.pure.encode_records(vals)
    batches = b"".join(build_batch(vals[i:i + 100], base_offset=i) for i in range(0, count, 100))
    log_bytes = batches * ctx.pick(4, 64, 256)
    for system, impl in impls:
        _rate(ctx, "encode_1000x100B", system, lambda: impl.encode_records(vals), count,
              "rec/s", note="values only, one batch body")
    for system, impl in impls:
        _rate(ctx, "decode_1000x100B", system, lambda: impl.decode_records(body, count),
              count, "rec/s", note="to (offset, ts, key, value, headers) tuples")
    for system, impl in impls:
        _rate(ctx, "scan_verify_crc", system,
              lambda: impl.scan_batches(log_bytes, 0, len(log_bytes), True),
              len(log_bytes), "B/s", note="batches of 100 records, CRC checked")

    data = os.urandom(1 << 20)
    crcs = []
    if native.c is not None:
        crcs.append(("kqlite C", native.c.crc32c,
                     "SSE4.2" if getattr(native.c, "HARDWARE_CRC", False) else "software"))
    else:
        ctx.skip("crc32c_1MiB", "kqlite C", "C helpers not built")
    crcmod = ctx.peer("crcmod.predefined", "crc32c_1MiB", "crcmod")
    if crcmod is not None:
        fun = crcmod.mkPredefinedCrcFun("crc-32c")
        crcs.append(("crcmod", fun, "crcmod's C extension" if _crcmod_has_c() else "pure"))
    pkg = ctx.peer("crc32c", "crc32c_1MiB", "crc32c package")
    if pkg is not None:
        crcs.append(("crc32c package", pkg.crc32c, ""))
    expected = None
    for system, fun, note in crcs:
        value = fun(data)
        expected = value if expected is None else expected
        if value != expected:
            raise AssertionError(f"{system} computes a different CRC-32C")
        _rate(ctx, "crc32c_1MiB", system, lambda: fun(data), len(data), "B/s", note=note)


def _crcmod_has_c():
    try:
        import crcmod._crcfunext  # noqa: F401
        return True
    except ImportError:
        return False
