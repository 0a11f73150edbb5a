"""Page-view events into a kqlite topic: the input of the clickstream pipeline.

Each event is a JSON object ``{"user": "u17", "page": "/pricing", "ts": <ms>,
"referrer": "search"}``; the record key is the user id (so one user's clicks stay
in order on one partition) and the record timestamp is the event time. A share of
the events arrive "late": their event time is up to ``late_ms`` before the newest
event so far, as happens with mobile clients that buffer.

    python examples/clickstream/generate.py --data-dir /tmp/clicks --events 5000
"""

import argparse
import json
import random
import time

import kqlite

TOPIC = "clicks"
PAGES = ["/", "/pricing", "/docs", "/docs/install", "/blog", "/blog/kqlite-1-0", "/signup",
         "/login", "/account", "/checkout"]
_WEIGHTS = [30, 12, 18, 9, 8, 6, 5, 7, 3, 2]       # a long tail, as real traffic
REFERRERS = ["search", "direct", "social", "email", None]


def ensure_topic(db, partitions=3):
    db.create_topic(TOPIC, partitions, exist_ok=True)


def generate(db, events, start_ms, span_ms=5 * 60_000, late_share=0.1, late_ms=90_000,
             users=200, seed=None):
    """Append ``events`` page views with event times spread over ``[start_ms,
    start_ms + span_ms)``; returns the largest event time written."""
    rng = random.Random(seed)
    ensure_topic(db)
    newest = start_ms
    with db.producer(linger_ms=5, batch_size=64 * 1024) as producer:
        for i in range(events):
            ts = start_ms + (i * span_ms) // max(events, 1) + rng.randrange(1000)
            if i and rng.random() < late_share:
                ts = max(start_ms, newest - rng.randrange(late_ms))
            newest = max(newest, ts)
            user = f"u{rng.randrange(users)}"
            event = {"user": user, "page": rng.choices(PAGES, _WEIGHTS)[0], "ts": ts,
                     "referrer": rng.choice(REFERRERS)}
            producer.send(TOPIC, key=user.encode(), value=json.dumps(event).encode(),
                          timestamp=ts, headers=[("schema", b"page-view/v1")])
    return newest


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--events", type=int, default=5000)
    ap.add_argument("--start-ms", type=int, default=None,
                    help="event time of the first event (default: 10 minutes ago)")
    ap.add_argument("--seed", type=int, default=None)
    args = ap.parse_args(argv)
    start = args.start_ms if args.start_ms is not None else int(time.time() * 1000) - 600_000
    with kqlite.open(args.data_dir) as db:
        newest = generate(db, args.events, start, seed=args.seed)
        print(f"appended {args.events} page views to {TOPIC!r} (event times up to {newest})")


if __name__ == "__main__":
    main()
