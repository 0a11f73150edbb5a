"""What authorization costs a plaintext produce: one broker in this process, sent the same
Produce requests over a loopback socket with no authorizer (Kafka's default: everything
allowed, nothing asked) and with Kafka's ACL authorizer holding 1,000 ACLs, the one that
lets the producer write among them.

Every Produce asks the authorizer for WRITE on its topic. The requests are small (one
batch of 100 records of 100 bytes, acks=1, eight in flight), so the share of a request's
work the check takes is as large as a producer makes it. The ACLs are spread as an
operator's would be: literal topic ACLs of many principals, prefixed ones of three prefix
lengths (each looked up for every check), group ACLs, some of them DENY, and the
producer's own prefixed ALLOW.

What is compared is the CPU time the broker's event loop spends per request (the thread
that decodes, checks, hands the append to a storage thread and answers; the append itself
is the same either way): the two authorizers take turns on the same broker (swapped between
turns), and each figure is the best of its turns, which on a shared machine is the one
least disturbed. Wall-clock figures drift with whatever else the machine runs by more than
the few microseconds a check costs. The data dir is on ``/dev/shm`` when there is one, so
that the disk does not add its own noise. A second figure is the authorizer alone: one
WRITE check with the 1,000 ACLs, per second.
"""

import asyncio
import itertools
import os
import socket
import struct
import threading
import time

NAME = "authorization"
DESCRIPTION = "plaintext produce requests: no authorizer vs the ACL authorizer with 1,000 ACLs"

ACL_COUNT = 1000
RECORDS, VALUE_SIZE, IN_FLIGHT = 100, 100, 8
PLAIN = "kqlite serve (no authorizer)"
WITH_ACLS = "kqlite serve (ACL authorizer, 1,000 ACLs)"
TOPIC = "bench-produce"


def run(ctx):
    from kqlite.server.authorization import AclAuthorizer, AllowAll
    turns = ctx.pick(4, 30, 60)
    per_turn = ctx.pick(300, 1000, 2000)
    shm = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    with ctx.workdir("authorization") as scratch:
        data_dir = os.path.join(shm or scratch, f"kqlite-bench-acls-{os.getpid()}")
        os.makedirs(data_dir)
        try:
            _write_acls(data_dir)
            authorizers = {PLAIN: AllowAll(), WITH_ACLS: AclAuthorizer()}
            with _InProcessBroker(data_dir, authorizers[WITH_ACLS]) as broker:
                _one_check(ctx, authorizers[WITH_ACLS])
                client = _Client(broker.port)
                client.send(2000)              # warm: the log open, the caches filled
                best = {system: None for system in authorizers}
                for turn in range(turns):
                    order = list(authorizers) if turn % 2 == 0 else list(authorizers)[::-1]
                    for system in order:
                        broker.broker.authorizer = authorizers[system]
                        before = broker.loop_cpu()
                        client.send(per_turn)
                        spent = (broker.loop_cpu() - before) / per_turn
                        if best[system] is None or spent < best[system]:
                            best[system] = spent
                client.close()
        finally:
            _remove(data_dir)
    where = "/dev/shm" if shm else "the scratch dir"
    for system, seconds in best.items():
        ctx.add("produce_request_loop_cpu", system, 1.0 / seconds, "ops/s",
                n=per_turn, seconds=seconds * per_turn,
                note=f"Produce requests per second of event-loop CPU, {RECORDS} x "
                     f"{VALUE_SIZE} B, best of {turns} turns, data dir in {where}")


def _one_check(ctx, authorizer):
    """The authorizer alone: one WRITE check on a topic, 1,000 ACLs present (checks/s)."""
    from kqlite.protocol.acl import AclOperation, Resource
    from kqlite.protocol.security import ANONYMOUS, SecurityProtocol
    from kqlite.server.request_context import RequestContext
    context = RequestContext(ANONYMOUS, "PLAINTEXT", SecurityProtocol.PLAINTEXT, "127.0.0.1",
                             5555, "bench", 0, 9, 1)
    topic = Resource.topic(TOPIC)
    n = ctx.pick(20_000, 300_000, 1_000_000)
    started = time.perf_counter()
    for _ in range(n):
        if not authorizer.authorize(context, AclOperation.WRITE, topic):
            raise RuntimeError("the benchmark's ACLs do not let its producer write")
    ctx.add_rate("authorize_one_check", WITH_ACLS, n, time.perf_counter() - started,
                 unit="ops/s", note="WRITE on a topic, 1,000 ACLs present")


def _write_acls(data_dir):
    """1,000 ACLs in the data dir's ACL file, before the broker starts."""
    from kqlite.protocol.acl import (AclOperation as Op, AclPermissionType as Perm,
                                     PatternType as P, ResourcePattern, ResourceType as R)
    from kqlite.server.authorization.acl_store import acl_file
    from kqlite.server.authorization.bindings import AclEntry

    acls = {ResourcePattern(R.TOPIC, "bench-", P.PREFIXED):
            {AclEntry("User:ANONYMOUS", "*", Op.ALL, Perm.ALLOW)}}
    made = 1
    for i in itertools.count():
        if made == ACL_COUNT:
            break
        if i % 10 < 7:
            pattern = ResourcePattern(R.TOPIC, f"other-{i}", P.LITERAL)
        elif i % 10 < 9:
            pattern = ResourcePattern(R.TOPIC, f"team-{i % 150}-", P.PREFIXED)
        else:
            pattern = ResourcePattern(R.GROUP, f"group-{i}", P.LITERAL)
        entry = AclEntry(f"User:user-{i % 50}", "*", (Op.READ, Op.WRITE, Op.DESCRIBE)[i % 3],
                         Perm.DENY if i % 17 == 0 else Perm.ALLOW)
        entries = acls.setdefault(pattern, set())
        if entry not in entries:
            entries.add(entry)
            made += 1
    acl_file(data_dir).update(lambda _acls: {p: frozenset(e) for p, e in acls.items()})


def _remove(path):
    import shutil
    shutil.rmtree(path, ignore_errors=True)


class _InProcessBroker:
    """A Broker on its own event loop in a thread (its CPU time is that thread's)."""

    def __init__(self, data_dir, authorizer):
        from kqlite.server import Broker
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

        async def start():
            broker = Broker(data_dir, "127.0.0.1", 0, authorizer=authorizer)
            await broker.start()
            broker.db.create_topic(TOPIC, 1)
            return broker
        self.broker = self._run(start())
        self.port = self.broker.port

    def _run(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(60)

    def loop_cpu(self):
        async def now():
            return time.thread_time()
        return self._run(now())

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._run(self.broker.stop(grace=5))
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)


class _Client:
    """The same Produce v9 request, sent with ``IN_FLIGHT`` unanswered at a time."""

    def __init__(self, port):
        from kqlite.format.batch import build_batch
        from kqlite.protocol import ApiKey
        from kqlite.protocol.connection import encode_request
        batch = build_batch([os.urandom(VALUE_SIZE) for _ in range(RECORDS)])
        self.frame = encode_request(ApiKey.PRODUCE, 9, 1, "bench", {
            "acks": 1, "timeout_ms": 5000, "topic_data": [
                {"name": TOPIC, "partition_data": [{"index": 0, "records": batch}]}]})
        self.sock = socket.create_connection(("127.0.0.1", port))

    def send(self, count):
        sent = answered = 0
        while answered < count:
            while sent < count and sent - answered < IN_FLIGHT:
                self.sock.sendall(self.frame)
                sent += 1
            self._exactly(struct.unpack(">i", self._exactly(4))[0])
            answered += 1

    def _exactly(self, n):
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise RuntimeError("the broker closed the connection")
            data += chunk
        return data

    def close(self):
        self.sock.close()
