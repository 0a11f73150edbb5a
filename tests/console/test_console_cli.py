"""``kqlite ui``: loopback and read-only by default, served until SIGTERM."""

import re
import signal
import subprocess
import sys
import threading

import kqlite
from kqlite.cli.main import build_parser
from console_processes import ENV, get, post


def test_kqlite_ui_defaults_to_loopback_and_read_only():
    args = build_parser().parse_args(["ui", "data"])
    assert args.listen.startswith("127.0.0.1:") and args.allow_writes is False
    serve = build_parser().parse_args(["serve", "--data-dir", "d"])
    assert serve.console is None and serve.console_allow_writes is None


def test_kqlite_ui_serves_a_data_dir_until_sigterm(tmp_path):
    with kqlite.open(tmp_path / "data") as db:
        db.create_topic("clicks")
    proc = subprocess.Popen(
        [sys.executable, "-m", "kqlite.cli", "ui", str(tmp_path / "data"), "--listen",
         "127.0.0.1:0"], stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
        env=ENV)
    try:
        line = proc.stderr.readline()
        url = re.search(r"(http://127\.0\.0\.1:\d+)/", line).group(1)
        assert "read-only" in line
        threading.Thread(target=proc.stderr.read, daemon=True).start()
        status, page = get(f"{url}/topics")
        assert status == 200 and b"clicks" in page
        assert post(f"{url}/topics", {"name": "x"})[0] == 403
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
