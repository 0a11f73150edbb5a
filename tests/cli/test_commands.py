"""kqlite produce / consume / topics / groups as a user runs them."""

import io
import json
import subprocess
import sys

import pytest

from kqlite.cli.main import build_parser, main


def run(*argv, stdin=None, monkeypatch=None):
    if stdin is not None:
        monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    out = io.StringIO()
    args = build_parser().parse_args([str(a) for a in argv])
    return args.run(args, out=out), out.getvalue()


def test_produce_consume_round_trip(tmp_path, monkeypatch):
    d = tmp_path / "data"
    assert run("topics", d, "create", "clicks", "--partitions", "3",
               "--config", "retention.ms=3600000")[0] == 0
    code, _ = run("produce", d, "clicks", "--key-separator", ":",
                  stdin="u1:hello\nu2:world\nu1:again\n", monkeypatch=monkeypatch)
    assert code == 0
    code, text = run("consume", d, "clicks", "--from-beginning", "--format", "json")
    rows = [json.loads(line) for line in text.splitlines()]
    assert sorted(r["value"] for r in rows) == ["again", "hello", "world"]
    by_key = {}
    for r in rows:
        by_key.setdefault(r["key"], set()).add(r["partition"])
    assert all(len(parts) == 1 for parts in by_key.values())  # a key stays on one partition
    code, text = run("topics", d, "describe", "clicks")
    assert "PartitionCount: 3" in text and "retention.ms=3600000" in text
    assert run("topics", d, "list")[1].split() == ["clicks"]


def test_json_produce_with_headers_and_binary(tmp_path, monkeypatch):
    d = tmp_path / "data"
    lines = [json.dumps({"key": "k", "value": "v1", "headers": {"h": "x"}, "partition": 0,
                         "timestamp": 1234}),
             json.dumps({"value": {"base64": "AAEC"}, "partition": 0})]
    run("produce", d, "t", "--format", "json", "--create", "1", stdin="\n".join(lines) + "\n",
        monkeypatch=monkeypatch)
    _, text = run("consume", d, "t", "--offset", "0", "--partition", "0", "--format", "json")
    rows = [json.loads(line) for line in text.splitlines()]
    assert rows[0]["headers"] == {"h": "x"} and rows[0]["timestamp"] == 1234
    assert rows[1]["value"] == {"base64": "AAEC"} or rows[1]["value"] == "\x00\x01\x02"


def test_consume_from_time_and_max_messages(tmp_path, monkeypatch):
    d = tmp_path / "data"
    lines = [json.dumps({"value": f"v{i}", "timestamp": 1000 + i, "partition": 0})
             for i in range(10)]
    run("produce", d, "t", "--format", "json", "--create", "1", stdin="\n".join(lines) + "\n",
        monkeypatch=monkeypatch)
    _, text = run("consume", d, "t", "--from-time", "1005")
    assert text.split() == ["v5", "v6", "v7", "v8", "v9"]
    _, text = run("consume", d, "t", "--from-beginning", "--max-messages", "3")
    assert text.split() == ["v0", "v1", "v2"]


def test_group_consume_commits_and_groups_show_lag(tmp_path, monkeypatch):
    d = tmp_path / "data"
    run("produce", d, "t", "--create", "2", stdin="a\nb\nc\nd\n", monkeypatch=monkeypatch)
    _, text = run("consume", d, "t", "--group", "g", "--from-beginning", "--timeout-ms", "200")
    assert sorted(text.split()) == ["a", "b", "c", "d"]
    _, again = run("consume", d, "t", "--group", "g", "--timeout-ms", "200")
    assert again == ""
    run("produce", d, "t", "--partition", "1", stdin="e\n", monkeypatch=monkeypatch)
    code, text = run("groups", d, "describe", "g")
    assert code == 0 and "total lag: 1" in text
    assert run("groups", d, "list")[1].split() == ["g"]
    assert run("groups", d, "describe", "nobody")[0] == 1


def test_errors_exit_nonzero(tmp_path, monkeypatch, capsys):
    d = tmp_path / "data"
    assert main(["consume", str(d), "missing"]) == 1
    assert "unknown topic" in capsys.readouterr().err
    run("topics", d, "create", "t")
    monkeypatch.setattr(sys, "stdin", io.StringIO("not json\n"))
    assert main(["produce", str(d), "t", "--format", "json"]) == 1
    assert "line 1" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["topics", str(d), "frobnicate"])


def test_installed_command_runs():
    proc = subprocess.run([sys.executable, "-m", "kqlite.cli", "--help"], capture_output=True,
                          text=True)
    assert proc.returncode == 0
    for command in ("produce", "consume", "topics", "groups", "dump", "check"):
        assert command in proc.stdout
