"""docs/img/broker-peer.svg is what scripts/broker_peer_plot.py draws from the extract kept
beside it, and docs/benchmarks.md shows it and says how to draw it again: the picture
cannot drift from its numbers, nor the page from the picture."""

import importlib.util
import json
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
IMG = os.path.join(ROOT, "docs", "img")


def _plot():
    spec = importlib.util.spec_from_file_location(
        "broker_peer_plot", os.path.join(ROOT, "scripts", "broker_peer_plot.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_committed_picture_is_drawn_from_the_committed_extract():
    with open(os.path.join(IMG, "broker-peer.json"), encoding="utf-8") as f:
        doc = json.load(f)
    with open(os.path.join(IMG, "broker-peer.svg"), encoding="utf-8") as f:
        assert _plot().render(doc) == f.read()


def test_the_benchmarks_page_shows_the_picture_and_how_to_redraw_it():
    with open(os.path.join(ROOT, "docs", "benchmarks.md"), encoding="utf-8") as f:
        page = f.read()
    assert "](img/broker-peer.svg)" in page
    assert "scripts/broker_peer_plot.py" in page


def _result(case, system, value, unit="rec/s", workload="broker_peer"):
    return {"workload": workload, "case": case, "system": system, "value": value,
            "unit": unit, "n": 1, "seconds": 1.0, "key": f"{workload}/{case}/{system}"}


def test_the_extract_keeps_the_broker_peer_rows_and_the_picture_draws_both_brokers():
    plot = _plot()
    doc = {"mode": "quick", "generated": "then", "machine": {"cpus": 2},
           "results": [_result("bandwidth_1KiB", plot.LOOPBACK, 4e9, "B/s"),
                       _result("consume_1KiB_p16", plot.KQLITE, 300_000),
                       _result("consume_1KiB_p16", plot.TANSU, 200_000),
                       _result("e2e_latency_10k_p99", plot.KQLITE, 0.002, "s"),
                       _result("e2e_latency_10k_p99", plot.TANSU, 0.1, "s"),
                       _result("append", "kqlite", 1.0, workload="log")],
           "targets": [{"id": "peer_consume_1KiB_p16", "ratio": 1.5, "required": 1.5,
                        "status": "PASS", "detail": ""},
                       {"id": "append_x", "ratio": 1, "required": 1, "status": "PASS"}]}
    kept = plot.extract(doc)
    assert [r["case"] for r in kept["results"]] == [
        "bandwidth_1KiB", "consume_1KiB_p16", "consume_1KiB_p16", "e2e_latency_10k_p99",
        "e2e_latency_10k_p99"]
    assert [t["id"] for t in kept["targets"]] == ["peer_consume_1KiB_p16"]
    svg = plot.render(kept)
    assert "consume 1 KiB, 16 p" in svg and "1.50\u00d7" in svg      # 300 k / 200 k
    assert "latency p99 at 10 k msgs/s" in svg and "50.00\u00d7" in svg   # 100 ms / 2 ms
    assert "loopback TCP 4 GB/s" in svg
    assert svg.count(plot.COLORS[plot.KQLITE]) == svg.count(plot.COLORS[plot.TANSU]) == 2


def test_a_results_file_without_broker_peer_throughput_is_refused():
    with pytest.raises(ValueError):
        _plot().render({"results": [_result("append", "kqlite", 1.0, workload="log")]})
