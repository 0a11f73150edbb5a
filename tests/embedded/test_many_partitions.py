"""A data dir with more partitions than there are file descriptors.

The child process lowers its soft RLIMIT_NOFILE to 1024 and creates 2,000 partitions
(20 topics of 100) with --soak; the default run keeps the same proportion at a quarter
of the size (256 descriptors, 5 topics of 100 partitions). It writes to and reads back from every one of them through
Producer and Consumer, with background retention running and a consumer group
committing offsets: the Database's LRU of idle logs keeps the descriptors bounded.
"""

import os
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CHILD = textwrap.dedent("""
    import resource, sys
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    LIMIT, TOPICS, PARTITIONS = (int(a) for a in sys.argv[2:5])
    resource.setrlimit(resource.RLIMIT_NOFILE, (LIMIT, hard))
    import kqlite

    names = [f"topic{t}" for t in range(TOPICS)]
    with kqlite.open(sys.argv[1], retention_check_interval_ms=200) as db:
        for name in names:
            db.create_topic(name, partitions=PARTITIONS)
        with db.producer() as producer:
            futures = [producer.send(name, b"%s/%d" % (name.encode(), p), partition=p,
                                     key=b"k%d" % p)
                       for name in names for p in range(PARTITIONS)]
        offsets = [f.result().offset for f in futures]
        assert offsets == [0] * len(offsets), set(offsets)
        consumer = db.consumer(names, group="all", auto_offset_reset="earliest",
                               enable_auto_commit=False)
        got = {}
        while len(got) < TOPICS * PARTITIONS:
            for rec in consumer.poll(timeout_ms=100, max_records=3000):
                got[(rec.topic, rec.partition)] = rec.value
        consumer.commit()
        consumer.close()
        for name in names:
            for p in range(PARTITIONS):
                assert got[(name, p)] == b"%s/%d" % (name.encode(), p), (name, p)
        assert len(db.logs) <= db.logs.max_open
        described = db.describe_topic(names[-1])
        assert [p.end_offset for p in described.partitions] == [1] * PARTITIONS
    with kqlite.open(sys.argv[1], retention_check_interval_ms=0) as db:
        committed = db.offsets.committed("all")
        assert committed == {(n, p): 1 for n in names for p in range(PARTITIONS)}
    print("ok", db.logs.max_open)
""")


@pytest.mark.slow
def test_partitions_beyond_the_descriptor_limit(tmp_path, soak):
    limit, topics = (1024, 20) if soak else (256, 5)
    result = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path / "data"), str(limit),
                             str(topics), "100"], cwd=ROOT,
                            capture_output=True, text=True, timeout=900)
    assert "Too many open files" not in result.stderr
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split() == ["ok", str(limit // 8)]
