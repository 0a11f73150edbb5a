"""Processes for test_group_processes.py (run as scripts, not collected by pytest).

    group_worker.py produce DATA TOPIC N DONE_FILE
    group_worker.py consume DATA TOPIC GROUP OUT_FILE DONE_FILE TOTAL
"""

import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

import kqlite  # noqa: E402


def produce(data, topic, n, done):
    with kqlite.open(data, retention_check_interval_ms=0) as db:
        with db.producer(linger_ms=5) as producer:
            for i in range(int(n)):
                producer.send(topic, b"rec-%06d" % i, key=b"k%d" % (i % 97))
                if i % 200 == 0:
                    producer.flush()
                    time.sleep(0.01)
    open(done, "w").close()


def consume(data, topic, group, out_path, done, total):
    total = int(total)
    with kqlite.open(data, retention_check_interval_ms=0) as db, open(out_path, "a") as out:
        consumer = db.consumer(topic, group=group, auto_offset_reset="earliest",
                               enable_auto_commit=False, rebalance_check_interval_ms=50)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            records = consumer.poll(timeout_ms=100)
            for r in records:
                out.write(f"{r.partition} {r.offset} {r.value.decode()}\n")
            out.flush()
            if records:
                consumer.commit()
            if os.path.exists(done) and \
                    sum(db.offsets.committed(group).values()) >= total:
                break
        consumer.close()


if __name__ == "__main__":
    {"produce": produce, "consume": consume}[sys.argv[1]](*sys.argv[2:])
