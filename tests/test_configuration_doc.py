"""docs/configuration.md is held to the code: its tables of topic configs, broker and
cluster settings are what scripts/configuration_tables.py writes from the config rules
and the serve settings; every option ``kqlite serve`` accepts is on the page and nothing
on the page is unknown to it; the Database's options are the ones ``kqlite.open`` takes;
the defaults stated are the code's defaults.
"""

import argparse
import importlib.util
import inspect
import re
from pathlib import Path

from kqlite.cli.main import build_parser
from kqlite.cli.serve_settings import SETTINGS
from kqlite.db.database import Database
from kqlite.server import Broker
from kqlite.server.request_memory import DEFAULT_QUEUED_MAX_REQUEST_BYTES
from kqlite.server.storage_io import DEFAULT_IO_THREADS

ROOT = Path(__file__).parents[1]
PAGE = ROOT / "docs" / "configuration.md"


def _generator():
    spec = importlib.util.spec_from_file_location(
        "configuration_tables", ROOT / "scripts" / "configuration_tables.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _table(page, heading):
    """The rows (lists of cells, backticks kept) of the first table after ``heading``."""
    after = page.split(heading, 1)[1]
    rows, started = [], False
    for line in after.splitlines():
        if line.startswith("|"):
            started = True
            rows.append([cell.strip() for cell in re.split(r"(?<!\\) \| ", line.strip("| "))])
        elif started:
            break
    assert rows, f"no table after {heading!r}"
    return rows[2:]      # without the header and the |---| line


def _serve_parser():
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices["serve"]


def test_the_page_is_what_the_generator_writes():
    page = PAGE.read_text()
    assert _generator().render(page) == page, \
        "docs/configuration.md is stale: run scripts/configuration_tables.py"


def test_the_generator_check_fails_on_a_stale_page(tmp_path, monkeypatch, capsys):
    generator = _generator()
    stale = PAGE.read_text().replace("| `segment.bytes` | 1073741824 (1 GiB) |",
                                     "| `segment.bytes` | 1024 |")
    page = tmp_path / "configuration.md"
    page.write_text(stale)
    monkeypatch.setattr(generator, "PAGE", str(page))
    assert generator.main(["--check"]) == 1
    assert "-| `segment.bytes` | 1024 |" in capsys.readouterr().out
    assert page.read_text() == stale            # --check changes nothing
    assert generator.main([]) == 0
    assert page.read_text() == PAGE.read_text()


def test_every_serve_option_is_on_the_page_and_nothing_else():
    page = PAGE.read_text()
    listed = [row[0].strip("`").split(" ")[0] for heading in
              ("## Broker (`kqlite serve`)", "### Cluster mode (`--zookeeper`)")
              for row in _table(page, heading) if row[0] != "(fixed)"]
    accepted = [flag for action in _serve_parser()._actions for flag in action.option_strings
                if flag not in ("-h", "--help")]
    assert sorted(listed) == sorted(accepted)
    assert len(listed) == len(set(listed))


def test_every_serve_option_names_its_kafka_property_as_the_page_does():
    page = PAGE.read_text()
    rows = {row[0].strip("`").split(" ")[0]: row for heading in
            ("## Broker (`kqlite serve`)", "### Cluster mode (`--zookeeper`)")
            for row in _table(page, heading)}
    for setting in SETTINGS:
        if setting.flag is None:       # a property only: the security table
            continue
        assert rows[setting.flag][1] == (f"`{setting.kafka}`" if setting.kafka else "—")


def test_every_property_only_setting_is_in_the_security_table():
    rows = _table(PAGE.read_text(), "### Listeners and security (properties)")
    listed = [row[0].strip("`") for row in rows]
    assert listed == [s.kafka for s in SETTINGS if s.flag is None]


def test_serve_defaults_are_the_brokers_and_the_cluster_nodes():
    # The embedding API's constructors and kqlite serve must agree on every default the
    # page states; the parameter each flag feeds, where its name differs from the flag's.
    from kqlite.cluster.node import ClusterNode
    renamed = {"--num-partitions": "default_partitions",
               "--max-request-bytes": "max_request_size",
               "--zookeeper-session-timeout-ms": "session_timeout_ms"}
    params = {**inspect.signature(ClusterNode.__init__).parameters,
              **inspect.signature(Broker.__init__).parameters}
    checked = set()
    for setting in SETTINGS:
        if setting.flag is None:
            continue
        name = renamed.get(setting.flag, setting.flag[2:].replace("-", "_"))
        if setting.default is None or name not in params:
            continue
        assert params[name].default == setting.default, setting.flag
        checked.add(setting.flag)
    # The transaction coordinator's settings are the fields of its TransactionConfig.
    from kqlite.server.coordinator.txn.config import TransactionConfig
    transaction_fields = {
        "--transaction-max-timeout-ms": "max_timeout_ms",
        "--transactional-id-expiration-ms": "id_expiration_ms",
        "--transaction-abort-timed-out-transaction-cleanup-interval-ms":
            "abort_timed_out_interval_ms",
        "--transaction-remove-expired-transaction-cleanup-interval-ms":
            "remove_expired_interval_ms",
        "--transaction-partition-verification-enable": "partition_verification"}
    for setting in SETTINGS:
        if setting.flag in transaction_fields:
            assert getattr(TransactionConfig(), transaction_fields[setting.flag]) == \
                setting.default, setting.flag
            checked.add(setting.flag)
    # The ACL authorizer's settings are its own constructor's.
    from kqlite.server.authorization import AclAuthorizer
    acl_params = inspect.signature(AclAuthorizer.__init__).parameters
    defaults = {s.flag: s.default for s in SETTINGS}
    assert frozenset(acl_params["super_users"].default) == defaults["--super-users"]
    assert acl_params["allow_everyone_if_no_acl_found"].default == \
        defaults["--allow-everyone-if-no-acl-found"]
    checked |= {"--super-users", "--allow-everyone-if-no-acl-found"}
    # The console's are attach_to_broker's (kqlite/console/service.py).
    from kqlite.console.service import attach_to_broker
    console_params = inspect.signature(attach_to_broker).parameters
    assert console_params["allow_writes"].default == defaults["--console-allow-writes"]
    assert console_params["interval"].default == defaults["--console-sample-interval"]
    checked |= {"--console-allow-writes", "--console-sample-interval"}
    # The others are computed (None: see their rows) or are not constructor parameters
    # (--listen is split into host and port, --no-auto-create-topics is negated,
    # --authorizer-class-name picks the authorizer).
    assert {s.flag for s in SETTINGS if s.flag} - checked == {
        "--config", "--override",
        "--data-dir", "--listen", "--advertised-host", "--metrics-listen", "--console",
        "--no-auto-create-topics", "--io-threads", "--max-connections",
        "--max-connections-per-ip", "--max-connections-per-ip-overrides",
        "--queued-max-request-bytes", "--zookeeper", "--authorizer-class-name"}
    shown = {s.flag: s.shown for s in SETTINGS}
    assert shown["--io-threads"] == str(DEFAULT_IO_THREADS) == \
        str(params["io_threads"].default)
    assert shown["--queued-max-request-bytes"].startswith(
        f"{DEFAULT_QUEUED_MAX_REQUEST_BYTES} (256 MiB)")


def test_the_database_options_are_the_ones_kqlite_open_takes():
    rows = _table(PAGE.read_text(), "## Database (`kqlite.open(path, config, **options)`)")
    listed = {row[0].strip("`"): row[1] for row in rows}
    signature = inspect.signature(Database.__init__).parameters
    options = {name: p.default for name, p in signature.items()
               if p.kind is p.KEYWORD_ONLY and name != "fs"}   # fs: the tests' seam
    assert listed.keys() == options.keys()
    for name, default in options.items():
        if isinstance(default, (bool, int)):
            assert listed[name].strip("`") == str(default), name


def test_every_rule_and_setting_says_what_it_does():
    from kqlite.storage.config_rules import RULES
    undocumented = [name for name, rule in RULES.items() if len(rule.doc.split()) < 4]
    undocumented += [s.flag or s.kafka for s in SETTINGS if len(s.doc.split()) < 4]
    assert undocumented == []


def test_serve_help_is_each_settings_documentation_in_plain_text():
    helps = {flag: action.help for action in _serve_parser()._actions
             for flag in action.option_strings}
    for setting in SETTINGS:
        if setting.flag is None:
            continue
        text = helps[setting.flag].replace("%%", "%")
        assert "`" not in text, setting.flag
        assert setting.doc.replace("`", "") in text, setting.flag
        if setting.kafka:
            assert text.startswith(f"{setting.kafka}: "), setting.flag
