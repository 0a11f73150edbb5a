"""``kqlite serve --io-threads N`` (Kafka's num.io.threads)."""

import subprocess
import sys

from broker_process import BrokerProcess, RawClient


def test_a_broker_with_two_storage_threads_serves(tmp_path):
    broker = BrokerProcess(tmp_path / "data", ["--io-threads", "2"])
    try:
        client = RawClient(broker)
        assert client.metadata_ok()
        client.close()
    finally:
        assert broker.stop() == 0


def test_a_non_positive_thread_count_is_refused_with_its_reason(tmp_path):
    done = subprocess.run([sys.executable, "-m", "kqlite.cli", "serve", "--data-dir",
                           str(tmp_path / "data"), "--io-threads", "0"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "--io-threads: expected a positive integer, not '0'" in done.stderr
