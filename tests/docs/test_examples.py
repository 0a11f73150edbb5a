"""Every ```python block of README.md and docs/*.md runs as it stands.

Theory of operation: a page's examples are read like a doctest session. Its blocks run in
order in one namespace (a later block may use an earlier block's names), in a fresh
empty working directory, so an example that makes ``data/`` makes it there. A block that
cannot run on its own says so on the line before its fence, with the reason:

    <!-- example: not run (needs a broker on 127.0.0.1:9092) -->

docs/contributing.md states the convention for writers. The parser refuses a marker
without a reason and a marker that no ```python block follows, so a marker cannot
silently skip nothing or lose its block. What a page leaves unclosed (a Database, a
Log, a Producer, a Consumer) is closed after its last block so its threads and locks
do not outlive the test.
"""

import contextlib
import glob
import io
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

_FENCE = re.compile(r"^(?P<indent> {0,3})```(?P<info>\S*)\s*$")
_MARKER = re.compile(r"^ {0,3}<!--\s*example:\s*not run\s*(?:\((?P<reason>[^)]*)\))?\s*-->\s*$")


class MarkerError(ValueError):
    """A not-run marker without a reason, or with no python block after it."""


def python_blocks(text):
    """[(line, source, reason)] of each ```python block of ``text``, in order: ``line``
    is the fence's 1-based line, ``reason`` the not-run marker's reason or None."""
    lines = text.split("\n")
    blocks = []
    marker = None                       # (line, reason) of a marker waiting for its block
    i = 0
    while i < len(lines):
        found = _MARKER.match(lines[i])
        if found:
            reason = (found.group("reason") or "").strip()
            if not reason:
                raise MarkerError(f"line {i + 1}: a not-run marker needs a reason")
            marker = (i + 1, reason)
            i += 1
            continue
        fence = _FENCE.match(lines[i])
        if not fence:
            if marker and lines[i].strip():
                raise MarkerError(f"line {marker[0]}: the not-run marker is not followed "
                                  "by a ```python block")
            i += 1
            continue
        indent, info = len(fence.group("indent")), fence.group("info")
        end = i + 1
        while end < len(lines) and not re.match(r"^ {0,3}```\s*$", lines[end]):
            end += 1
        if info == "python":
            body = "\n".join(line[indent:] for line in lines[i + 1:end])
            blocks.append((i + 1, body, marker[1] if marker else None))
        elif marker:
            raise MarkerError(f"line {marker[0]}: the not-run marker is not followed "
                              "by a ```python block")
        marker = None
        i = end + 1
    if marker:
        raise MarkerError(f"line {marker[0]}: the not-run marker is not followed "
                          "by a ```python block")
    return blocks


def pages():
    """The Markdown pages whose examples run: README.md and every page of docs/."""
    found = [os.path.join(ROOT, "README.md")]
    found += sorted(glob.glob(os.path.join(ROOT, "docs", "**", "*.md"), recursive=True))
    return [os.path.relpath(p, ROOT) for p in found]


def _pages_with_examples():
    """The pages with at least one block that runs (the others are in NOT_RUN)."""
    out = []
    for page in pages():
        with open(os.path.join(ROOT, page), encoding="utf-8") as f:
            if any(reason is None for _line, _source, reason in python_blocks(f.read())):
                out.append(page)
    return out


def _close_what_is_left(namespace):
    import kqlite
    closable = (kqlite.Consumer, kqlite.Producer, kqlite.Log, kqlite.Database)
    # Consumers and producers first: closing the Database under them would make their
    # close fail.
    for kind in closable:
        for value in list(namespace.values()):
            if isinstance(value, kind):
                with contextlib.suppress(Exception):
                    value.close()


# The blocks that do not run, per page: growing this list needs a reason in the page
# and a look at whether the example could make what it needs instead.
NOT_RUN = {
    "docs/embedded-cluster.md": ["needs ZooKeeper and brokers 2 and 3 above",
                                 "needs the three brokers and ZooKeeper above"],
    "docs/database.md": ["needs the data dir of a cluster broker"],
    "docs/mirroring.md": ["needs two brokers to mirror between"],
    "docs/protocol.md": ["an excerpt of kqlite/protocol/schema/fetch.py, with fields left out"],
    "docs/security.md": ["needs the SASL_SSL broker this page starts"],
    "docs/spark.md": ["needs a Spark session"] * 7,
    "docs/transactions.md": ["needs a broker on 127.0.0.1:9092"],
}


def run_examples(text, name):
    """Run the python blocks of ``text`` (a page called ``name``) in order in one
    namespace, in the current directory; returns how many ran. A failing block raises
    AssertionError naming ``name:line``."""
    namespace = {"__name__": "__main__"}
    ran = 0
    try:
        for line, source, reason in python_blocks(text):
            if reason is not None:
                continue
            code = compile(source, f"{name}:{line}", "exec")
            with contextlib.redirect_stdout(io.StringIO()):
                try:
                    exec(code, namespace)
                except Exception as exc:
                    raise AssertionError(f"the example at {name}:{line} fails: "
                                         f"{type(exc).__name__}: {exc}") from exc
            ran += 1
    finally:
        _close_what_is_left(namespace)
    return ran


@pytest.mark.parametrize("page", _pages_with_examples())
def test_every_example_of_the_page_runs(page, tmp_path, monkeypatch):
    with open(os.path.join(ROOT, page), encoding="utf-8") as f:
        text = f.read()
    monkeypatch.chdir(tmp_path)
    assert run_examples(text, page) >= 1


def test_the_examples_not_run_are_the_known_few():
    not_run = {}
    for page in pages():
        with open(os.path.join(ROOT, page), encoding="utf-8") as f:
            reasons = [r for _line, _source, r in python_blocks(f.read()) if r is not None]
        if reasons:
            not_run[page] = reasons
    assert not_run == NOT_RUN


def test_a_marker_skips_exactly_the_next_block():
    text = ("```python\nx = 1\n```\n"
            "<!-- example: not run (needs a broker) -->\n"
            "```python\nbroker()\n```\n"
            "  ```python\n  y = x + 1\n  ```\n")
    assert python_blocks(text) == [(1, "x = 1", None), (5, "broker()", "needs a broker"),
                                   (8, "y = x + 1", None)]


def test_a_marker_without_reason_is_refused():
    with pytest.raises(MarkerError, match="needs a reason"):
        python_blocks("<!-- example: not run -->\n```python\nx = 1\n```\n")
    with pytest.raises(MarkerError, match="needs a reason"):
        python_blocks("<!-- example: not run () -->\n```python\nx = 1\n```\n")


def test_a_marker_without_its_block_is_refused():
    with pytest.raises(MarkerError, match="not followed"):
        python_blocks("<!-- example: not run (spark) -->\nSome text.\n```python\nx\n```\n")
    with pytest.raises(MarkerError, match="not followed"):
        python_blocks("<!-- example: not run (spark) -->\n```\nkqlite serve\n```\n")
    with pytest.raises(MarkerError, match="not followed"):
        python_blocks("text\n<!-- example: not run (spark) -->\n")


def test_a_failing_example_fails_its_page(tmp_path, monkeypatch):
    """A broken example fails with its page and line; the blocks before it ran, and
    they shared their names with it."""
    monkeypatch.chdir(tmp_path)
    text = ("```python\nopen('first', 'w').close()\nfirst = 1\n```\n\n"
            "```python\nprint(first + ts_ms)\n```\n")
    with pytest.raises(AssertionError, match=r"page.md:6 fails: NameError: name 'ts_ms'"):
        run_examples(text, "page.md")
    assert os.path.exists("first")


def test_a_page_of_working_examples_runs_each_block(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    text = ("```python\nimport kqlite\nlog = kqlite.Log.open('data/t-0')\n```\n"
            "<!-- example: not run (needs a broker) -->\n```python\nraise SystemExit\n```\n"
            "```python\nlog.append([b'a'])\n```\n")
    assert run_examples(text, "page.md") == 2
    assert os.path.isdir("data/t-0")
