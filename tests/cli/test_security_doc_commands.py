"""The ``kqlite acls`` and ``kqlite quotas`` commands docs/security.md shows on a data dir
run as shown, in the order shown, on a fresh data dir (those on a cluster's ZooKeeper or
a broker take the same arguments: tests/cluster/test_zk_acls.py, tests/cli)."""

import os
import re
import shlex

from kqlite.cli.main import main

PAGE = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "security.md")


def _commands():
    text = open(PAGE, encoding="utf-8").read().replace("\\\n", " ")
    return [shlex.split(line.split("#", 1)[0])[1:] for line in text.splitlines()
            if re.match(r"kqlite (acls|quotas) \w+ --data-dir data\b", line)]


def test_the_page_shows_commands_of_both():
    kinds = {argv[0] for argv in _commands()}
    assert kinds == {"acls", "quotas"}


def test_the_pages_data_dir_commands_run(tmp_path, monkeypatch, capsys):
    (tmp_path / "data").mkdir()
    monkeypatch.chdir(tmp_path)
    for argv in _commands():
        assert main(argv) == 0, argv
    capsys.readouterr()
    assert main(["acls", "list", "--data-dir", "data"]) == 0
    listed = capsys.readouterr().out
    assert "User:alice" in listed and "User:ops" in listed and "Deny" not in listed
