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
