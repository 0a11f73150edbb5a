"""The console's router: an HttpRequest in, an HttpResponse out, the clock passed in.

Theory of operation. :meth:`Console.handle` decides everything about a request in this
order, each step with its own answer, before any page reads storage:

  step            rule                                                  answer
  host            no login is asked and the Host header names neither   403
                  an IP address, localhost nor this machine (a DNS
                  rebinding page must not read a loopback console)
  login           the source needs one and the request has no valid     401 + Basic challenge
                  HTTP Basic credentials (auth.py)
                  the broker has TLS listeners and no SASL listener     403
  method          GET (HEAD) for pages, POST for writes                 405
  writes          POST while the console is read-only                   403
                  a form not UTF-8, or of more than 64 fields            400
                  POST without the console's form token                 403
  path            not one of :meth:`Console._route`'s                   404
  values          a topic, group or number outside limits.py            400
  authorization   the broker's authorizer refuses the user: DESCRIBE   403
                  a topic or group, READ a topic's records, DESCRIBE
                  the cluster (a write is the user's Kafka request:
                  the broker answers it with its own refusal, shown)
  storage         an unknown topic or partition                         404
  other brokers   (a cluster broker) a broker that cannot answer: its   200, the cells
                  cells of the page are its error (cluster_reads.py);   "error: ..."
                  /api/messages of a partition whose leader cannot      503
                  be read

Pages are HTML (pages.py); the same data is JSON under ``/api/``; plots are SVG under
``/chart/``. Reads go through the source (sources.py), which runs them in a storage
thread; the sampler (:meth:`Console.sample`) is fed by a task of the caller's
(service.py) with the time passed in, so every plot is a function of the samples.
"""

import base64
import binascii
import ipaddress
import json
import secrets
import socket
from importlib import resources
from typing import Any, Awaitable, Callable, Optional

from ..errors import KqliteError, OffsetOutOfRangeError, UnknownTopicError
from ..protocol.acl import CLUSTER, AclOperation, Resource, ResourceType
from ..server.http_listener import HttpRequest, HttpResponse
from . import charts, limits, pages, reads
from .sampler import Rates, Samples
from .cluster_reads import Failed, Offsets, sample_lags
from .reads import PartitionRow, TopicPage, TopicRow
from .sources import ANONYMOUS_USER, GroupView, User

__all__ = ["Console"]

Form = dict[str, str]       # a request's query, or a POST's form fields

_HTML = "text/html; charset=utf-8"
_JSON = "application/json"
_SVG = "image/svg+xml"
_JS = "text/javascript; charset=utf-8"
_CSP = ("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; "
        "style-src 'unsafe-inline'; frame-ancestors 'none'")


def _script() -> bytes:
    return resources.files("kqlite.console").joinpath("static/console.js").read_bytes()


class Console:
    """The console over ``source`` (an EmbeddedSource or a BrokerSource)."""

    def __init__(self, source: Any) -> None:
        self.source = source
        self.writes = bool(source.allow_writes)
        self.token = secrets.token_urlsafe(24)     # the form token: no cross-site POST
        self.samples = Samples()
        self.rates = Rates()
        self._cursor = 0            # the next cluster group to sample (cluster_reads.py)
        self._script = _script()

    # -- sampling -----------------------------------------------------------------------------

    async def sample(self, now: float) -> None:
        """One sample of every group's lag and of the throughput counters at ``now``."""
        catch_up = self.source.kind == "embedded"
        remote = getattr(self.source, "remote", None)
        if remote is not None and not self.source.needs_login:
            # a cluster's groups, a few each round, from their coordinators and leaders
            lags, self._cursor = await sample_lags(remote, ANONYMOUS_USER, self._cursor)
        else:
            lags = await self.source.read(reads.lag_samples, catch_up)
        for (group, topic, p), lag in lags.items():
            self.samples.add(f"lag/{group}/{topic}-{p}", now, lag)
        totals: dict[Any, Any] = {}
        for (group, _t, _p), lag in lags.items():
            totals[group] = totals.get(group, 0) + lag
        for group, total in totals.items():
            self.samples.add(f"lagtotal/{group}", now, total)
        for name, rate in self.rates.feed(now, self.source.counters()).items():
            self.samples.add(f"rate/{name}", now, rate)

    # -- dispatch -----------------------------------------------------------------------------

    async def handle(self, request: HttpRequest, now: float) -> HttpResponse:
        user = ANONYMOUS_USER._replace(client=request.client)
        if not self.source.needs_login and not trusted_host(request.headers.get("host")):
            return HttpResponse.text(403, "open this console by its address (an IP "
                                          "address, localhost or this machine's name)\n")
        if self.source.needs_login:
            if self.source.login.refused:
                return HttpResponse.text(403, "this broker has TLS listeners and no SASL "
                                              "listener: the console needs SASL to check "
                                              "a login\n")
            found = await self._login(request)
            if found is None:
                return HttpResponse(401, "text/plain; charset=utf-8", b"login required\n",
                                    (("WWW-Authenticate",
                                      'Basic realm="kqlite console", charset="UTF-8"'),))
            user = found
        if request.method not in ("GET", "HEAD", "POST"):
            return HttpResponse.text(405, "GET or POST\n")
        if request.method == "POST":
            if not self.writes:
                return HttpResponse.text(403, "this console is read-only (start it with "
                                              "--allow-writes to change anything)\n")
            try:
                form = _form(request)
            except limits.BadRequest as exc:
                return HttpResponse.text(400, f"{exc}\n")
            if not secrets.compare_digest(form.get("token", "").encode(), self.token.encode()):
                return HttpResponse.text(403, "the form token is missing or wrong\n")
        else:
            form = request.query
        route = self._route(request.method, request.path)
        if route is None:
            return HttpResponse.text(404, "not found\n")
        handler, arg = route
        try:
            response: HttpResponse = await handler(user, arg, form, now)
            return response
        except limits.BadRequest as exc:
            return HttpResponse.text(400, f"{exc}\n")
        except _Refused as exc:
            return HttpResponse.text(403, f"{exc}\n")
        except (UnknownTopicError, OffsetOutOfRangeError):
            # the storage's message names the data dir's path: not for a browser
            return HttpResponse.text(404, "no such topic, partition or offset\n")

    def _route(self, method: str, path: str) -> Optional[tuple[Any, Any]]:
        parts = [p for p in path.split("/") if p]
        get = method in ("GET", "HEAD")
        table: dict[Any, Any] = {
            (True, ()): self._home, (True, ("topics",)): self._topics,
            (True, ("messages",)): self._messages, (True, ("groups",)): self._groups,
            (True, ("cluster",)): self._cluster, (True, ("chart", "lag")): self._lag_chart,
            (True, ("chart", "throughput")): self._throughput_chart,
            (True, ("static", "console.js")): self._static,
            (True, ("api", "topics")): self._api_topics,
            (True, ("api", "messages")): self._api_messages,
            (True, ("api", "groups")): self._api_groups,
            (True, ("api", "cluster")): self._api_cluster,
            (False, ("topics",)): self._create_topic, (False, ("messages",)): self._produce,
        }
        handler = table.get((get, tuple(parts)))
        if handler is not None:
            return handler, None
        if len(parts) == 2 and parts[0] in ("topics", "groups") and get:
            return (self._topic if parts[0] == "topics" else self._group), parts[1]
        if len(parts) == 3 and parts[0] == "api" and parts[1] in ("topics", "groups") and get:
            return (self._api_topic if parts[1] == "topics" else self._api_group), parts[2]
        if len(parts) == 3 and not get and parts[0] == "topics" and parts[2] == "delete":
            return self._delete_topic, parts[1]
        if len(parts) == 3 and not get and parts[0] == "groups" and parts[2] == "reset":
            return self._reset_group, parts[1]
        return None

    async def _login(self, request: HttpRequest) -> Optional[User]:
        header = request.headers.get("authorization", "")
        scheme, _, encoded = header.partition(" ")
        if scheme.lower() != "basic" or len(encoded) > 1024:
            return None
        try:
            name, sep, password = base64.b64decode(encoded.strip(), validate=True).decode(
                "utf-8").partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return None
        if not sep or not name or not await self.source.check_login(name, password):
            return None
        return User(name, password, request.client)

    # -- helpers ------------------------------------------------------------------------------

    def _page(self, title: str, body: str, user: User, message: str = "") -> HttpResponse:
        text = pages.layout(title, body, kind=self.source.kind,
                            user="" if user.name == "ANONYMOUS" else user.name,
                            writes=self.writes, message=message)
        return HttpResponse(200, _HTML, text.encode(), (_CSP,))

    def _json(self, value: Any) -> HttpResponse:
        return HttpResponse(200, _JSON, json.dumps(value, default=_jsonable).encode())

    def _check(self, user: User, operation: AclOperation, resource: Resource) -> None:
        if not self.source.authorize(user, operation, resource):
            raise _Refused(f"{user.name} may not {operation.name} {resource.resource_type.name}"
                           f" {resource.name}")

    def _visible(self, user: User, names: list[Any], kind: ResourceType) -> list[Any]:
        return [n for n in names if self.source.authorize(user, AclOperation.DESCRIBE,
                                                          Resource(kind, n))]

    async def _topic_rows(self, user: User) -> list[Any]:
        rows = await self.source.read(reads.list_topics)
        if getattr(self.source, "remote", None) is not None:
            # a cluster broker lists every topic of the cluster, hosted here or not
            local = {r.name for r in rows}
            rows = sorted(rows + [TopicRow(t, n, None, t.startswith("__"))
                                  for t, n in self.source.cluster_topics().items()
                                  if t not in local], key=lambda r: r.name)[:limits.MAX_TOPICS]
        allowed = set(self._visible(user, [r.name for r in rows], ResourceType.TOPIC))
        return [r for r in rows if r.name in allowed]

    # -- pages --------------------------------------------------------------------------------

    async def _home(self, user: User, _arg: Any, form: Form, now: float) -> HttpResponse:
        return HttpResponse(303, "text/plain", b"", (("Location", "/topics"),))

    async def _static(self, user: User, _arg: Any, form: Form, now: float) -> HttpResponse:
        return HttpResponse(200, _JS, self._script)

    async def _topics(self, user: User, _arg: Any, form: Form, now: float) -> HttpResponse:
        rows = await self._topic_rows(user)
        return self._page("Topics", pages.topics_page(rows, writes=self.writes,
                                                      token=self.token), user)

    async def _topic_data(self, user: User, name: str, form: Form) -> Any:
        topic = limits.topic(name)
        self._check(user, AclOperation.DESCRIBE, Resource(ResourceType.TOPIC, topic))
        first = limits.optional_integer(form, "first", 1 << 31) or 0
        latest = form.get("offsets") == "1"
        if getattr(self.source, "remote", None) is None:
            return await self.source.read(reads.topic_page, topic, first, latest), latest
        return await self._cluster_topic_page(user, topic, first), True

    async def _cluster_topic_page(self, user: User, topic: str, first: int) -> TopicPage:
        """A topic's page on a cluster broker: the partitions of the metadata cache,
        their offsets from their leaders; segment files of the partitions hosted here."""
        count = self.source.cluster_topics().get(topic)
        try:
            local: Optional[TopicPage] = await self.source.read(reads.topic_page, topic,
                                                                first, False)
        except UnknownTopicError:
            if count is None:
                raise
            local = None
        if count is None:
            assert local is not None
            count = local.partition_count
        shown = range(first, min(count, first + limits.PARTITIONS_PER_PAGE))
        offsets = await self.source.remote.offsets(user, [(topic, p) for p in shown])
        elsewhere = [p for p in shown if not self.source.hosted(topic, p)]
        sizes = await self.source.remote.sizes(user, topic, elsewhere) if elsewhere else {}
        here = {r.partition: r for r in local.partitions} if local is not None else {}
        rows = []
        for p in shown:
            row = here.get(p) if self.source.hosted(topic, p) else None
            if row is None:
                row = PartitionRow(p, sizes.get(p), [], False, None, None, None, None)
            found = offsets.get((topic, p))
            if isinstance(found, Offsets):
                row = row._replace(start=found.start, high_watermark=found.high_watermark,
                                   last_stable=found.last_stable)
            elif isinstance(found, Failed):
                row = row._replace(start=found, high_watermark=found, last_stable=found)
            rows.append(row)
        if local is None:
            return TopicPage(topic, str(self.source.node.cache.topic_id(topic) or ""), count,
                             first, rows, {}, {})
        return local._replace(partition_count=count, partitions=rows)

    async def _topic(self, user: User, name: str, form: Form, now: float) -> HttpResponse:
        page, latest = await self._topic_data(user, name, form)
        return self._page(f"Topic {page.name}", pages.topic_page(
            page, writes=self.writes, token=self.token, latest=latest), user)

    async def _browse(self, user: User, form: Form) -> Optional[Any]:
        if not form.get("topic"):
            return None
        topic = limits.topic(form.get("topic"))
        self._check(user, AclOperation.READ, Resource(ResourceType.TOPIC, topic))
        partition = limits.partition(form.get("partition") or "0")
        offset = limits.optional_integer(form, "offset")
        timestamp = limits.optional_integer(form, "timestamp")
        count = limits.count(form.get("count"))
        search = limits.search(form.get("search"))
        window = limits.window(form.get("window"))
        remote = getattr(self.source, "remote", None)
        if remote is not None and remote.leader(topic, partition) not in (
                None, self.source.broker.broker_id):
            # led elsewhere: read from its leader (a Failed when it cannot answer)
            return await remote.browse(user, topic, partition, offset=offset,
                                       timestamp=timestamp, count=count, search=search,
                                       window=window)
        return await self.source.read(
            lambda db: reads.browse(db, topic, partition, offset=offset, timestamp=timestamp,
                                    count=count, search=search, window=window))

    async def _messages(self, user: User, _arg: Any, form: Form, now: float) -> HttpResponse:
        page = await self._browse(user, form)
        failed = str(page) if isinstance(page, Failed) else ""
        names = [r.name for r in await self._topic_rows(user)]
        return self._page("Messages", pages.messages_page(
            None if failed else page, dict(form), names, writes=self.writes,
            token=self.token), user, failed)

    async def _group_list(self, user: User) -> list[Any]:
        stored = await self.source.read(reads.group_names)
        live = await self.source.live_groups()
        elsewhere: dict[str, str] = {}
        if getattr(self.source, "remote", None) is not None:
            # every broker's groups; a broker that does not answer leaves its own out
            found, _failed = await self.source.remote.group_names(user)
            elsewhere = {g: state for g, state in found.items() if g not in live}
        names = self._visible(user, sorted(set(stored) | set(live) | set(elsewhere))
                              [:limits.MAX_GROUPS], ResourceType.GROUP)
        # members are counted for this broker's groups; another's page shows its own
        return [(g, live[g].state if g in live else
                 elsewhere.get(g) or "stored offsets",
                 len(live[g].members) if g in live else None if g in elsewhere else 0)
                for g in names]

    async def _groups(self, user: User, _arg: Any, form: Form, now: float) -> HttpResponse:
        return self._page("Consumer groups", pages.groups_page(await self._group_list(user)),
                          user)

    async def _group_data(self, user: User, name: str) -> tuple[Any, ...]:
        group = limits.group(name)
        self._check(user, AclOperation.DESCRIBE, Resource(ResourceType.GROUP, group))
        live = (await self.source.live_groups()).get(group)
        remote = getattr(self.source, "remote", None)
        if remote is not None and live is None:
            # coordinated by another broker (or by none that answers): ask its coordinator
            offsets = await remote.group_offsets(user, group)
            view = await self.source.describe_group(user, group)
            if isinstance(view, Failed):
                view = GroupView(group, str(view), "", [])
            if isinstance(offsets, Failed):
                view = view._replace(state=str(offsets))
                offsets = []
        else:
            view = live
            offsets = await self.source.read(reads.group_offsets, group)
        offsets = [row for row in offsets if self.source.authorize(
            user, AclOperation.DESCRIBE, Resource(ResourceType.TOPIC, row[0]))]
        return group, view, offsets

    def _lag_svg(self, group: str) -> str:
        series = {n.split("/", 2)[2]: self.samples.get(n)
                  for n in self.samples.names(f"lag/{group}/")}
        series = dict(sorted(series.items(), key=lambda kv: -kv[1][-1][1])
                      [:charts.MAX_LINES - 1])
        series["total"] = self.samples.get(f"lagtotal/{group}")
        return charts.line_chart(f"lag of {group}", series, " records")

    async def _group(self, user: User, name: str, form: Form, now: float) -> HttpResponse:
        group, view, offsets = await self._group_data(user, name)
        return self._page(f"Group {group}", pages.group_page(
            group, view, offsets, self._lag_svg(group), writes=self.writes,
            token=self.token), user)

    def _throughput_svg(self) -> str:
        return charts.line_chart("throughput per second", {
            n.split("/", 1)[1]: self.samples.get(n) for n in self.samples.names("rate/")})

    async def _cluster(self, user: User, _arg: Any, form: Form, now: float) -> HttpResponse:
        self._check(user, AclOperation.DESCRIBE, CLUSTER)
        if form.get("part") == "view":      # the fragment the script refreshes
            return HttpResponse(200, _HTML, pages.cluster_view(
                self.source.cluster(), self.source.kind).encode())
        return self._page("Cluster", pages.cluster_page(
            self.source.cluster(), self.source.kind, self._throughput_svg(),
            self.source.latencies()), user)

    async def _lag_chart(self, user: User, _arg: Any, form: Form, now: float) -> HttpResponse:
        group = limits.group(form.get("group"))
        self._check(user, AclOperation.DESCRIBE, Resource(ResourceType.GROUP, group))
        return HttpResponse(200, _SVG, self._lag_svg(group).encode())

    async def _throughput_chart(self, user: User, _arg: Any, form: Form,
                                now: float) -> HttpResponse:
        self._check(user, AclOperation.DESCRIBE, CLUSTER)
        return HttpResponse(200, _SVG, self._throughput_svg().encode())

    # -- JSON ---------------------------------------------------------------------------------

    async def _api_topics(self, user: User, _arg: Any, form: Form, now: float) -> HttpResponse:
        return self._json([r._asdict() for r in await self._topic_rows(user)])

    async def _api_topic(self, user: User, name: str, form: Form, now: float) -> HttpResponse:
        page, _latest = await self._topic_data(user, name, form)
        data = page._asdict()
        data["partitions"] = [{k: _cell(v) for k, v in r._asdict().items()}
                              for r in page.partitions]
        return self._json(data)

    async def _api_messages(self, user: User, _arg: Any, form: Form,
                            now: float) -> HttpResponse:
        if not form.get("topic"):
            raise limits.BadRequest("topic is required")
        page = await self._browse(user, form)
        assert page is not None              # a topic was given
        if isinstance(page, Failed):         # the partition's leader did not answer
            return HttpResponse.text(503, f"{page}\n")
        fmt = form.get("format", "auto")
        data = page._asdict()
        data["records"] = [{"offset": r.offset, "timestamp": r.timestamp,
                            "key": _shown(r.key, fmt), "value": _shown(r.value, fmt),
                            "headers": [[k, _shown(v, fmt)] for k, v in r.headers]}
                           for r in page.records]
        return self._json(data)

    async def _api_groups(self, user: User, _arg: Any, form: Form, now: float) -> HttpResponse:
        return self._json([{"group": g, "state": s, "members": n}
                           for g, s, n in await self._group_list(user)])

    async def _api_group(self, user: User, name: str, form: Form, now: float) -> HttpResponse:
        group, view, offsets = await self._group_data(user, name)
        return self._json({
            "group": group, "state": view.state if view else None,
            "members": [{"member": m, "client": c, "host": h, "assignment": a}
                        for m, c, h, a in (view.members if view else [])],
            "offsets": [{"topic": t, "partition": p, "committed": c, "end": _cell(e),
                         "lag": lag}
                        for t, p, c, e, lag in offsets],
            "lag": self.samples.get(f"lagtotal/{group}")})

    async def _api_cluster(self, user: User, _arg: Any, form: Form,
                           now: float) -> HttpResponse:
        self._check(user, AclOperation.DESCRIBE, CLUSTER)
        view = self.source.cluster()
        return self._json({
            "kind": self.source.kind,
            "cluster": None if view is None else view._asdict(),
            "latency_ms": {api: {"count": n, "p50": p50, "p99": p99}
                           for api, (n, p50, p99) in self.source.latencies().items()},
            "throughput": {n.split("/", 1)[1]: self.samples.get(n)
                           for n in self.samples.names("rate/")}})

    # -- writes -------------------------------------------------------------------------------

    async def _done(self, user: User, title: str, message: str, back: str) -> HttpResponse:
        body = pages.message_page(message) + f'<p><a href="{back}">back</a></p>'
        return self._page(title, body, user, "")

    async def _write(self, user: User, title: str, back: str,
                     action: Callable[[], Awaitable[str]]) -> HttpResponse:
        try:
            message = await action()
        except KqliteError as exc:
            message = f"refused: {exc}"
        except (OSError, ConnectionError) as exc:
            message = f"failed: {exc}"
        return await self._done(user, title, message, back)

    async def _create_topic(self, user: User, _arg: Any, form: Form,
                            now: float) -> HttpResponse:
        name = limits.topic(form.get("name"))
        count = limits.integer(form.get("partitions") or "1", "partitions")
        if not 1 <= count <= limits.MAX_NEW_PARTITIONS:
            raise limits.BadRequest(f"partitions is 1-{limits.MAX_NEW_PARTITIONS}")
        return await self._write(user, f"Create {name}", "/topics",
                                 lambda: self.source.create_topic(user, name, count))

    async def _delete_topic(self, user: User, name: str, form: Form,
                            now: float) -> HttpResponse:
        topic = limits.topic(name)
        return await self._write(user, f"Delete {topic}", "/topics",
                                 lambda: self.source.delete_topic(user, topic))

    async def _produce(self, user: User, _arg: Any, form: Form, now: float) -> HttpResponse:
        topic = limits.topic(form.get("topic"))
        partition = limits.partition(form.get("partition") or "0")
        key = form.get("key", "").encode() or None
        value = form.get("value", "").encode()
        if len(value) + len(key or b"") > limits.MAX_TEST_RECORD:
            raise limits.BadRequest(f"a test record is at most {limits.MAX_TEST_RECORD} bytes")
        return await self._write(
            user, f"Produce to {topic}", f"/messages?topic={topic}&partition={partition}",
            lambda: self.source.produce(user, topic, partition, key, value))

    async def _reset_group(self, user: User, name: str, form: Form,
                           now: float) -> HttpResponse:
        group = limits.group(name)
        to = form.get("to")
        if to not in ("earliest", "latest"):
            raise limits.BadRequest("to is earliest or latest")
        view = (await self.source.live_groups()).get(group)
        remote = getattr(self.source, "remote", None)
        elsewhere = remote is not None and view is None
        if elsewhere:
            # coordinated by another broker: its members, and its partitions' bounds
            # from their leaders
            view = await self.source.describe_group(user, group)
            if isinstance(view, Failed):
                return await self._done(user, f"Reset {group}", f"failed: {view.reason}",
                                        f"/groups/{group}")
        if view is not None and view.members:
            return await self._done(user, f"Reset {group}", "refused: the group has "
                                    "members (Kafka resets only an empty group)",
                                    f"/groups/{group}")
        if elsewhere:
            bounds = await self._cluster_group_bounds(user, group)
            if isinstance(bounds, Failed):
                return await self._done(user, f"Reset {group}", f"failed: {bounds.reason}",
                                        f"/groups/{group}")
        else:
            bounds = await self.source.read(reads.group_bounds, group)
        offsets = {(t, p): (start if to == "earliest" else end)
                   for t, p, start, end in bounds}
        return await self._write(user, f"Reset {group}", f"/groups/{group}",
                                 lambda: self.source.reset_offsets(user, group, offsets))


    async def _cluster_group_bounds(self, user: User, group: str) -> Any:
        """``[(topic, partition, log start, high watermark)]`` of a group another broker
        coordinates (a Failed when its coordinator or a leader does not answer: a reset
        moves every partition or none)."""
        rows = await self.source.remote.group_offsets(user, group)
        if isinstance(rows, Failed):
            return rows
        found = await self.source.remote.offsets(user, [(t, p) for t, p, *_ in rows])
        bounds = []
        for t, p, *_ in rows:
            offsets = found.get((t, p))
            if not isinstance(offsets, Offsets):
                return offsets or Failed(f"no offsets of {t}-{p}")
            bounds.append((t, p, offsets.start, offsets.high_watermark))
        return bounds


def trusted_host(header: Optional[str]) -> bool:
    """Whether a request's Host header may reach a console that asks no login: absent
    (HTTP/1.0), an IP address, ``localhost`` or this machine's name, with any port.
    Another name may be a DNS-rebinding page's, which resolves to this machine only to
    read what it serves."""
    if not header:
        return True
    host = header.strip().lower()
    if host.startswith("["):                           # [IPv6]:port
        host = host[1:host.find("]")] if "]" in host else host
    elif host.count(":") == 1:
        host = host.rsplit(":", 1)[0]
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        pass
    # gethostname, not getfqdn: a name lookup would wait on DNS on the event loop
    return host in ("localhost", "localhost.", socket.gethostname().lower())


class _Refused(Exception):
    """The broker's authorizer refused the user."""


def _form(request: HttpRequest) -> dict[Any, Any]:
    from urllib.parse import parse_qsl
    if not request.headers.get("content-type", "").startswith(
            "application/x-www-form-urlencoded"):
        return {}
    try:
        text = request.body.decode("utf-8")
        return dict(parse_qsl(text, keep_blank_values=True, max_num_fields=64))
    except UnicodeDecodeError:
        raise limits.BadRequest("a form is UTF-8") from None
    except ValueError:
        raise limits.BadRequest("a form has at most 64 fields") from None


def _shown(data: Optional[bytes], fmt: str) -> Any:
    from .values import show
    used, text = show(data, fmt)
    return {"format": used, "text": text}


def _cell(value: Any) -> Any:
    """A value of a JSON answer: a broker's error (cluster_reads.Failed) as its text."""
    return str(value) if isinstance(value, Failed) else value


def _jsonable(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, tuple):
        return list(value)
    return str(value)
