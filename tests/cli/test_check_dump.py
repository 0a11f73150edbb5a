"""`kqlite check` and `kqlite dump` on real segment files."""

import io
import os
import subprocess
import sys

import kqlite
from kqlite.cli.main import build_parser, main


def make_log(path, n=30):
    with kqlite.Log.open(path, segment_bytes=600, index_interval_bytes=1) as log:
        for i in range(n):
            log.append(kqlite.Record(key=b"k%d" % i, value=b"value %d" % i, timestamp=1000 + i))
    return sorted(os.path.join(path, f) for f in os.listdir(path) if f.endswith(".log"))


def run_cli(*argv):
    out = io.StringIO()
    args = build_parser().parse_args(argv)
    return args.run(args, out=out), out.getvalue()


def test_check_passes_on_a_healthy_data_dir(tmp_path):
    make_log(str(tmp_path / "data" / "t-0"))
    code, text = run_cli("check", str(tmp_path / "data"))
    assert code == 0 and "30 record(s)" in text


def test_check_fails_on_a_flipped_byte_and_names_file_and_position(tmp_path):
    segments = make_log(str(tmp_path / "t-0"))
    victim = segments[1]
    with open(victim, "r+b") as f:
        f.seek(70)
        b = f.read(1)
        f.seek(70)
        f.write(bytes([b[0] ^ 1]))
    code, text = run_cli("check", str(tmp_path / "t-0"))
    assert code == 1
    assert f"{victim}:0:" in text and "CRC" in text


def test_check_reports_a_bad_index_entry(tmp_path):
    segments = make_log(str(tmp_path / "t-0"))
    index = segments[0][:-4] + ".index"
    with open(index, "r+b") as f:
        f.write(b"\x00\x00\x00\x07\x00\x00\x00\x05")
    code, text = run_cli("check", segments[0])
    assert code == 1 and index in text


def test_check_as_a_command_exit_status(tmp_path):
    segments = make_log(str(tmp_path / "t-0"))
    with open(segments[-1], "ab") as f:
        f.write(b"\xff" * 40)
    proc = subprocess.run([sys.executable, "-m", "kqlite.cli", "check", "-q", str(tmp_path)],
                          capture_output=True, text=True)
    assert proc.returncode == 1
    assert segments[-1] in proc.stdout
    assert main(["check", str(tmp_path / "missing")]) == 2


def test_dump_batches_records_and_indexes(tmp_path):
    segments = make_log(str(tmp_path / "t-0"))
    code, text = run_cli("dump", "--deep", "--print-data", segments[0])
    assert code == 0
    assert "baseOffset: 0 lastOffset: 0 count: 1" in text and "isvalid: true" in text
    assert "| offset: 0 CreateTime: 1000 keySize: 2 valueSize: 7" in text
    assert "key: k0 payload: value 0" in text
    code, text = run_cli("dump", segments[0][:-4] + ".index", segments[0][:-4] + ".timeindex")
    assert code == 0 and "offset: 1 position:" in text and "timestamp: 1001 offset: 1" in text


# -- transactions -------------------------------------------------------------------------------

def make_transactional_log(path, **config):
    """UnifiedLogTest's four interleaved producers (two aborts), spread over segments."""
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "storage"))
    from txn_workload import Producers, kafka_interleaving
    with kqlite.Log.open(path, segment_bytes=128 * 5, **config) as log:
        kafka_interleaving(Producers(log))
        return [seg.txnindex.path for seg in log._segments if seg.txnindex.entries()]


def test_dump_shows_markers_and_transaction_index_entries(tmp_path):
    path = str(tmp_path / "t-0")
    with kqlite.Log.open(path) as log:
        log.append_marker(4242, 3, 5, True, timestamp=1_700_000_000_000)
        log.append_marker(4242, 3, 5, False, timestamp=1_700_000_000_001)
    (segment,) = [os.path.join(path, f) for f in os.listdir(path) if f.endswith(".log")]
    code, text = run_cli("dump", "--deep", segment)
    assert code == 0
    assert "isTransactional: true isControl: true" in text
    assert "isvalid: true endTxnMarker: COMMIT coordinatorEpoch: 5" in text
    assert "| offset: 0 CreateTime: 1700000000000 keySize: 4 valueSize: 6 headerKeys: [] " \
           "endTxnMarker: COMMIT coordinatorEpoch: 5" in text
    assert "endTxnMarker: ABORT coordinatorEpoch: 5" in text
    indexes = make_transactional_log(str(tmp_path / "u-0"))
    code, text = run_cli("dump", *indexes)
    assert code == 0
    assert "version: 0 producerId: 1 firstOffset: 0 lastOffset: 29 lastStableOffset: 8" in text
    assert "version: 0 producerId: 2 firstOffset: 8 lastOffset: 74 lastStableOffset: 36" in text


def test_check_verifies_transaction_indexes_against_the_data(tmp_path):
    path = str(tmp_path / "data" / "t-0")
    indexes = make_transactional_log(path)
    code, text = run_cli("check", str(tmp_path / "data"))
    assert code == 0 and "0 open transaction(s)" in text
    # A wrong last stable offset, an entry naming no marker, a missing entry.
    first = indexes[0]
    data = bytearray(open(first, "rb").read())
    data[33] ^= 1
    open(first, "wb").write(bytes(data))
    code, text = run_cli("check", path)
    assert code == 1 and f"{first}:0: entry (producer 1" in text and "should be" in text
    open(first, "wb").write(b"")
    code, text = run_cli("check", path)
    assert code == 1 and "missing entry (producer 1, first offset 0, last offset 29" in text
    open(first, "wb").write(bytes(34))
    code, text = run_cli("check", path)
    assert code == 1 and "names no ABORT marker" in text


def test_check_reports_open_and_hanging_transactions(tmp_path):
    path = str(tmp_path / "t-0")
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "storage"))
    from txn_workload import Producers
    with kqlite.Log.open(path) as log:
        Producers(log).txn(7, 2)
    code, text = run_cli("check", path)
    assert code == 0
    assert "open transaction of producer 7 from offset 0, begun 0 s ago" in text
    assert "1 open transaction(s), 0 hanging" in text
    code, text = run_cli("check", "-q", "--hanging-after-ms", "-1", path)
    assert code == 0 and text.startswith(f"{path}: hanging transaction of producer 7")
