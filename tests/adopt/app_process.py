"""The application of test_in_process_checked.py, as a process of its own: it embeds
broker 1 on its data dir (open_broker) and sends values with acks=all through the
in-process Producer, idempotent (Kafka 3.x's default), one at a time. The producer
retries a send after a retriable error with the same producer id and sequence; a send
refused with NOT_LEADER_OR_FOLLOWER (another broker leads, or leadership moved while the
send waited) is sent once more, the same batch, to the leader over the wire
(send_to_leader). A value is never sent again by the application otherwise. It reports
to the test on stdout, one JSON line per event, flushed:

``{"ready": true}``                               the broker has joined the cluster
``{"invoke": v}``                                 a send is about to be made
``{"ok": v, "offset": n}``                        acknowledged at offset n
``{"info": v, "error": text}``                    failed: it may have been written
``{"read": [[offset, v], ...]}``                  the final in-process read

A line ``stop`` on stdin ends the sends: the application waits until its replica's high
watermark reaches its log end, reads the whole partition in-process, reports it and
closes its broker. The test SIGKILLs it at any other time.

Usage: app_process.py DATA_DIR ZOOKEEPER PREFIX
"""

import json
import sys
import threading
import time

from kqlite.cluster.in_process import InProcessAppendError, open_broker
from kqlite.protocol import ErrorCode

TOPIC = "events"


def _say(**event):
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def main(path, zookeeper, prefix):
    broker = open_broker(path, zookeeper=zookeeper, broker_id=1, default_replication_factor=3,
                         replica_lag_time_max_ms=1000)
    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.readline(), stop.set()), daemon=True).start()
    _say(ready=True)
    producer = broker.producer(acks="all", timeout_ms=3000, delivery_timeout_ms=20000)
    i = 0
    while not stop.is_set():
        value = f"{prefix}-{i}"
        i += 1
        _say(invoke=value)
        try:
            offset = _send(broker, producer, value)
        except InProcessAppendError as exc:
            # Retries may have written it, whatever the last attempt answered.
            _say(info=value, error=str(exc))
            time.sleep(0.05)
        else:
            _say(ok=value, offset=offset)
    deadline = time.monotonic() + 60
    while (broker.high_watermark(TOPIC, 0) < broker.log_end(TOPIC, 0)
           and time.monotonic() < deadline):
        time.sleep(0.05)
    _say(read=[[r.offset, r.value.decode()] for r in broker.read(TOPIC, 0, 0)])
    broker.close()


def _send(broker, producer, value):
    try:
        return producer.send(TOPIC, value.encode(), partition=0).result().offset
    except InProcessAppendError as exc:
        if exc.error_code != ErrorCode.NOT_LEADER_OR_FOLLOWER:
            raise
        return broker.send_to_leader(TOPIC, 0, exc.batch, timeout_ms=3000)


if __name__ == "__main__":
    main(*sys.argv[1:4])
