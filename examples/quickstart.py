"""kqlite quickstart: a durable local queue with no server.

Appends a few thousand records to ./kqlite-quickstart/clicks-0, reads them back,
looks one up by time, and shows what is on disk. Run it twice: the second run
continues at the offset where the first stopped.
"""

import os
import sys
import time

import kqlite


def main(data_dir="kqlite-quickstart"):
    path = os.path.join(data_dir, "clicks-0")
    with kqlite.Log.open(path, segment_bytes=256 * 1024) as log:
        start = log.end_offset
        t0 = time.perf_counter()
        first = log.append([b"page-view %d" % i for i in range(start, start + 5000)])
        log.append(kqlite.Record(key=b"user-42", value=b"checkout",
                                 headers=[("source", b"quickstart")]))
        log.flush()
        elapsed = time.perf_counter() - t0
        print(f"appended 5001 records at offsets {first}..{log.end_offset - 1} "
              f"in {elapsed * 1000:.1f} ms (then fsync)")

        count = sum(1 for _ in log.read(start))
        last = list(log.read(log.end_offset - 1))[0]
        print(f"read back {count} records; last: key={last.key!r} value={last.value!r} "
              f"headers={last.headers!r}")
        when = last.timestamp
        print(f"first offset at or after {when}: {log.offset_for_time(when)}")
        print(f"log holds offsets [{log.start_offset}, {log.end_offset}) in "
              f"{len(log.segments)} segment(s), {log.size} bytes")
        print(f"implementation of the C helpers: {kqlite._native.IMPLEMENTATION}")
    print("files:", ", ".join(sorted(os.listdir(path))))


if __name__ == "__main__":
    main(*sys.argv[1:])
