"""The application of test_in_process_checked.py, as a process of its own: it embeds
broker 1 on its data dir (open_broker) and sends values with acks=all through the
in-process Producer, one at a time, each value sent once (never resent, whatever its
outcome). It reports to the test on stdout, one JSON line per event, flushed:

``{"ready": true}``                               the broker has joined the cluster
``{"invoke": v}``                                 a send is about to be made
``{"ok": v, "offset": n}``                        acknowledged at offset n
``{"fail": v, "error": text}``                    refused, nothing written
``{"info": v, "error": text}``                    the outcome is unknown
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
    producer = broker.producer(acks="all", timeout_ms=3000)
    i = 0
    while not stop.is_set():
        value = f"{prefix}-{i}"
        i += 1
        _say(invoke=value)
        try:
            offset = producer.send(TOPIC, value.encode(), partition=0).result().offset
        except InProcessAppendError as exc:
            # NOT_ENOUGH_REPLICAS writes nothing; a timeout or a leadership moved under a
            # waiting append (NOT_LEADER_OR_FOLLOWER) may have written it.
            written = exc.error_code != ErrorCode.NOT_ENOUGH_REPLICAS
            _say(**{"info" if written else "fail": value, "error": str(exc)})
            time.sleep(0.05)
        else:
            _say(ok=value, offset=offset)
    deadline = time.monotonic() + 60
    while (broker.high_watermark(TOPIC, 0) < broker.log_end(TOPIC, 0)
           and time.monotonic() < deadline):
        time.sleep(0.05)
    _say(read=[[r.offset, r.value.decode()] for r in broker.read(TOPIC, 0, 0)])
    broker.close()


if __name__ == "__main__":
    main(*sys.argv[1:4])
