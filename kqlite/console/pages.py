"""The console's HTML pages, rendered on the server from what reads.py and a source return.

Theory of operation. Each ``*_page`` function takes plain values and returns one complete
HTML document (str): no template engine, every interpolated string passes
:func:`html.escape` (``_e``), so a topic, group, key or header cannot inject markup.
Plots are inline SVG (charts.py); the one script, ``/static/console.js`` from the
package, only refreshes elements marked ``data-refresh`` and is not needed to read a
page. Forms that write are shown only when the console allows writes, and carry the
console's form token (app.py checks it).
"""

import datetime
import html
from typing import Any, Iterable, Optional

from . import limits, values

__all__ = ["layout", "topics_page", "topic_page", "messages_page", "groups_page",
           "group_page", "cluster_page", "cluster_view", "partition_state", "message_page"]


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _size(n: Optional[Any]) -> str:
    if not isinstance(n, int):
        return _opt(n)          # unknown, or a broker's error in its place
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def _opt(value: Optional[Any]) -> str:
    """A number, "—" when unknown, or the error a broker gave in its place."""
    return "—" if value is None else _e(str(value))


def _time(ms: int) -> str:
    try:
        return datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc).strftime(
            "%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"
    except (OverflowError, OSError, ValueError):
        return str(ms)


_STYLE = """
body{font-family:system-ui,sans-serif;margin:0;color:#222}
nav{background:#23395d;padding:.5em 1em}nav a{color:#fff;margin-right:1.2em;text-decoration:none}
nav .who{float:right;color:#cbd}main{padding:1em}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:2px 8px;
text-align:left;vertical-align:top}th{background:#eef}
pre{margin:0;max-width:60em;white-space:pre-wrap;word-break:break-all}
.chart{width:640px;max-width:100%;font-size:11px}.bad{color:#b00;font-weight:bold}
.note{color:#666}.message{background:#ffd;padding:.3em}form.inline{display:inline}
"""


def layout(title: str, body: str, *, kind: str, user: str = "", writes: bool = False,
           message: str = "") -> str:
    """A whole page: the navigation, ``body`` (already HTML), the script."""
    mode = "read-write" if writes else "read-only"
    banner = f'<p class="message" id="message">{_e(message)}</p>' if message else ""
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
            f'<title>{_e(title)} · kqlite console</title><style>{_STYLE}</style></head>'
            f'<body><nav><a href="/topics">Topics</a><a href="/messages">Messages</a>'
            f'<a href="/groups">Groups</a><a href="/cluster">Cluster</a>'
            f'<span class="who">{_e(kind)} · {mode}{" · " + _e(user) if user else ""}</span>'
            f'</nav><main><h1>{_e(title)}</h1>{banner}{body}</main>'
            f'<script src="/static/console.js"></script></body></html>')


def _table(headers: Iterable[str], rows: Iterable[Iterable[str]], id_: str = "") -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>"
                   for row in rows)
    ident = f' id="{_e(id_)}"' if id_ else ""
    return f"<table{ident}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _token_field(token: str) -> str:
    return f'<input type="hidden" name="token" value="{_e(token)}">'


def topics_page(topics: list[Any], *, writes: bool, token: str) -> str:
    rows = [(f'<a href="/topics/{_e(t.name)}">{_e(t.name)}</a>', str(t.partitions),
             _size(t.size), "internal" if t.internal else "") for t in topics]
    body = _table(("topic", "partitions", "size", ""), rows, "topics")
    if writes:
        body += (f'<h2>Create a topic</h2><form method="post" action="/topics" id="create">'
                 f'{_token_field(token)}<label>name <input name="name" required></label> '
                 f'<label>partitions <input name="partitions" value="1" size="4"></label> '
                 f'<button type="submit">create</button></form>')
    return body


def topic_page(page: Any, *, writes: bool, token: str, latest: bool) -> str:
    t = page.name
    rows = []
    for r in page.partitions:
        files = "<br>".join(f"{_e(n)} ({_size(s)})" for n, s in r.segment_files)
        link = f'<a href="/messages?topic={_e(t)}&amp;partition={r.partition}">browse</a>'
        rows.append((str(r.partition), _size(r.size), _opt(r.start), _opt(r.end),
                     _opt(r.high_watermark), _opt(r.last_stable), files, link))
    body = (f'<p>id {_e(page.topic_id)} · {page.partition_count} partitions</p>'
            + _table(("partition", "size", "start", "end", "high watermark",
                      "last stable", "segment files", ""), rows, "partitions"))
    last = page.first + len(page.partitions)
    nav = []
    if page.first > 0:
        nav.append(f'<a href="/topics/{_e(t)}?first='
                   f'{max(0, page.first - limits.PARTITIONS_PER_PAGE)}">previous</a>')
    if last < page.partition_count:
        nav.append(f'<a href="/topics/{_e(t)}?first={last}">next</a>')
    if not latest:
        nav.append(f'<a href="/topics/{_e(t)}?first={page.first}&amp;offsets=1">'
                   f'read the offsets of these partitions</a> <span class="note">(offsets '
                   f'are shown for open logs; this opens the logs of this page)</span>')
    body += "<p>" + " · ".join(nav) + "</p>"
    configs = [(_e(k) + (" <b>(set)</b>" if k in page.overrides else ""),
                _e(str(v).lower() if isinstance(v, bool) else v))
               for k, v in sorted(page.config.items())]
    body += "<h2>Configs</h2>" + _table(("config", "value"), configs, "configs")
    if writes:
        body += (f'<h2>Delete</h2><form method="post" action="/topics/{_e(t)}/delete" '
                 f'id="delete">{_token_field(token)}<button type="submit">delete topic '
                 f'{_e(t)}</button></form>')
    return body


def _shown(data: Optional[bytes], fmt: str) -> str:
    used, text = values.show(data, fmt)
    return f'<pre data-format="{used}">{_e(text)}</pre>'


def messages_page(page: Optional[Any], form: dict[Any, Any], topics: list[Any], *, writes: bool,
                  token: str) -> str:
    options = "".join(f'<option{" selected" if t == form.get("topic") else ""}>{_e(t)}'
                      f'</option>' for t in topics)
    fmt = form.get("format", "auto")
    formats = "".join(f'<option{" selected" if f == fmt else ""}>{f}</option>'
                      for f in values.FORMATS)
    body = (f'<form method="get" action="/messages" id="browse">'
            f'<label>topic <select name="topic">{options}</select></label> '
            f'<label>partition <input name="partition" size="4" '
            f'value="{_e(form.get("partition", "0"))}"></label> '
            f'<label>offset <input name="offset" size="10" '
            f'value="{_e(form.get("offset", ""))}"></label> '
            f'<label>or timestamp (ms) <input name="timestamp" size="14" '
            f'value="{_e(form.get("timestamp", ""))}"></label> '
            f'<label>count <input name="count" size="4" '
            f'value="{_e(form.get("count", limits.DEFAULT_RECORDS))}"></label> '
            f'<label>search <input name="search" value="{_e(form.get("search", ""))}">'
            f'</label> <label>within <input name="window" size="6" '
            f'value="{_e(form.get("window", limits.DEFAULT_WINDOW))}"> records</label> '
            f'<label>show as <select name="format">{formats}</select></label> '
            f'<button type="submit">show</button></form>')
    if page is not None:
        rows = []
        for r in page.records:
            headers = "<br>".join(f"{_e(k)}: {_shown(v, fmt)}" for k, v in r.headers)
            rows.append((str(r.offset), _e(_time(r.timestamp)), _shown(r.key, fmt),
                         _shown(r.value, fmt), headers))
        body += (f'<p>{_e(page.topic)}-{page.partition}: log start {page.log_start}, '
                 f'high watermark {page.log_end}; from offset {page.start}, '
                 f'{len(page.records)} shown of {page.scanned} read</p>'
                 + _table(("offset", "timestamp", "key", "value", "headers"), rows,
                          "records"))
        if page.next is not None:
            query = {k: v for k, v in form.items() if k not in ("offset", "timestamp")}
            query["offset"] = str(page.next)
            link = "&amp;".join(f"{_e(k)}={_e(v)}" for k, v in sorted(query.items()))
            body += f'<p><a href="/messages?{link}" id="next">next page</a></p>'
    if writes:
        body += (f'<h2>Produce a test record</h2><form method="post" action="/messages" '
                 f'id="produce">{_token_field(token)}'
                 f'<label>topic <select name="topic">{options}</select></label> '
                 f'<label>partition <input name="partition" size="4" value="0"></label> '
                 f'<label>key <input name="key"></label> '
                 f'<label>value <input name="value" required></label> '
                 f'<button type="submit">produce</button></form>')
    return body


def groups_page(groups: list[Any]) -> str:
    rows = [(f'<a href="/groups/{_e(g)}">{_e(g)}</a>', _e(state), _opt(members))
            for g, state, members in groups]
    return _table(("group", "state", "members"), rows, "groups")


def group_page(group: str, view: Optional[Any], offsets: list[Any], chart: str, *,
               writes: bool, token: str) -> str:
    body = ""
    if view is not None:
        body += f'<p>state {_e(view.state)} · protocol {_e(view.protocol or "—")}</p>'
        members = [(_e(member), _e(client), _e(host),
                    _e(", ".join(f"{t}-{p}" for t, p in assigned) or "—"))
                   for member, client, host, assigned in view.members]
        body += "<h2>Members</h2>" + _table(("member", "client", "host", "assignment"),
                                            members, "members")
    rows = [(_e(t), str(p), str(c), _opt(end), _opt(lag)) for t, p, c, end, lag in offsets]
    body += "<h2>Committed offsets</h2>" + _table(
        ("topic", "partition", "committed", "high watermark", "lag"), rows, "offsets")
    body += (f'<h2>Lag over the last hour</h2><div id="lag-chart" data-refresh='
             f'"/chart/lag?group={_e(group)}">{chart}</div>')
    empty = view is None or not view.members
    if writes and empty and offsets:
        body += (f'<h2>Reset offsets</h2><form method="post" action="/groups/{_e(group)}'
                 f'/reset" id="reset">{_token_field(token)}<label>to <select name="to">'
                 f'<option>earliest</option><option>latest</option></select></label> '
                 f'<button type="submit">reset</button></form>')
    elif writes and not empty:
        body += '<p class="note">Offsets can be reset once the group has no members.</p>'
    return body


def cluster_page(view: Optional[Any], kind: str, throughput: str,
                 latencies: dict[Any, Any]) -> str:
    """The cluster page: its brokers and partitions (refreshed by the script from
    ``/cluster?part=view``), the throughput plot, the request latencies."""
    body = (f'<div id="cluster-view" data-refresh="/cluster?part=view">'
            f'{cluster_view(view, kind)}</div>')
    body += (f'<h2>Throughput</h2><div id="throughput-chart" data-refresh="/chart/throughput">'
             f'{throughput}</div>')
    if latencies:
        timed = [(_e(api), str(n), f"{p50:.2f}", f"{p99:.2f}")
                 for api, (n, p50, p99) in sorted(latencies.items())]
        body += "<h2>Request latency (ms)</h2>" + _table(("request", "count", "p50", "p99"),
                                                         timed, "latency")
    return body


def partition_state(leader: int, isr: Any, replicas: Any, alive: Any) -> str:
    """A partition's health as Kafka's gauges count it:

    - ``offline``: no live leader (Kafka's OfflinePartitionsCount: "partitions that do
      not have an active leader");
    - ``under-replicated``: a live leader, an ISR smaller than the replica set (Kafka's
      UnderReplicatedPartitions: ``isr.size < replicas.size``);
    - ``ok`` otherwise.
    """
    if leader < 0 or leader not in alive:
        return "offline"
    if len(isr) < len(replicas):
        return "under-replicated"
    return "ok"


def cluster_view(view: Optional[Any], kind: str) -> str:
    """Brokers, the controller, partition health and leader balance (an HTML fragment)."""
    if view is None:
        body = (f'<p>{_e(kind)}: one {"broker" if kind == "broker" else "data dir"}, '
                f'no replication.</p>')
    else:
        alive = {b[0] for b in view.brokers}
        rows = [(str(b), _e(h), str(port), _e(rack or "—"),
                 "controller" if b == view.controller else "") for b, h, port, rack
                in view.brokers]
        body = (f'<p>this broker: {view.broker_id} · controller: {view.controller} · '
                f'{len(view.brokers)} live brokers</p>'
                + _table(("broker", "host", "port", "rack", ""), rows, "brokers"))
        leaders: dict[Any, Any] = {}
        states = []
        for topic, p, leader, isr, replicas, _offline_replicas in view.partitions:
            leaders[leader] = leaders.get(leader, 0) + 1
            states.append((partition_state(leader, isr, replicas, alive), topic, p, leader,
                           isr, replicas))
        counts = {state: sum(1 for row in states if row[0] == state)
                  for state in ("offline", "under-replicated")}
        balance = [(str(b), str(leaders.get(b, 0))) for b in sorted(alive)]
        # the partitions with a problem first, then the others, up to the page's bound
        states.sort(key=lambda row: row[0] == "ok")
        listed = (f'<p class="note">{limits.MAX_CLUSTER_ROWS} of {len(states)} partitions '
                  f'listed, those with a problem first</p>'
                  if len(states) > limits.MAX_CLUSTER_ROWS else "")
        parts = [(_e(topic), str(p), str(leader), _e(",".join(map(str, isr))),
                  _e(",".join(map(str, replicas))),
                  f'<span class="{"bad" if state != "ok" else ""}">{state}</span>')
                 for state, topic, p, leader, isr, replicas
                 in states[:limits.MAX_CLUSTER_ROWS]]
        body += (f'<p id="health">under-replicated partitions: <b id="under">'
                 f'{counts["under-replicated"]}</b> · offline partitions: <b id="offline">'
                 f'{counts["offline"]}</b></p>'
                 + "<h2>Leader balance</h2>" + _table(("broker", "leaders"), balance,
                                                      "balance")
                 + "<h2>Partitions</h2>" + listed
                 + _table(("topic", "partition", "leader", "isr", "replicas", "state"), parts,
                          "cluster-partitions"))
    return body


def message_page(text: str) -> str:
    return f'<p class="message">{_e(text)}</p>'
