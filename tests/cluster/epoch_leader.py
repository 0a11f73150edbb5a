"""EpochLeader: a scripted leader for what a single `kqlite serve` cannot play yet.

`kqlite serve` answers follower fetches from its log, but its fetch path does not look at
LastFetchedEpoch, so it never answers a DivergingEpoch; and as a single broker it never
answers NOT_LEADER_OR_FOLLOWER or a storage error on demand. This peer speaks through
the project's codec and serves Fetch from real kqlite Logs with Kafka's leader rules
(``Partition.readRecords``): the CurrentLeaderEpoch check, then
``truncation.diverging_epoch_for``, then a read to the log end. A Fetch that finds
nothing waits ``max_wait_ms`` before answering, as a leader's purgatory does.
``errors`` forces an error code per partition until it is removed.
"""

import asyncio

from kqlite.cluster.rules.truncation import diverging_epoch_for
from kqlite.protocol import ApiKey, ErrorCode, ServerConnection
from kqlite.protocol.connection import encode_response
from kqlite.storage import Isolation

_VERSIONS = [{"api_key": ApiKey.FETCH, "min_version": 0, "max_version": 17},
             {"api_key": ApiKey.LIST_OFFSETS, "min_version": 0, "max_version": 9},
             {"api_key": ApiKey.API_VERSIONS, "min_version": 0, "max_version": 4}]


class EpochLeader:
    def __init__(self, logs, *, leader_epoch):
        self.logs = logs                # {(topic, index): Log}
        self.leader_epoch = leader_epoch
        self.errors = {}                # {(topic, index): ErrorCode}
        self.fetched = []               # (topic, index, fetch_offset, last_fetched_epoch)
        self.server = None
        self.port = None

    async def start(self):
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def stop(self):
        self.server.close()
        await self.server.wait_closed()

    async def _serve(self, reader, writer):
        conn = ServerConnection()
        try:
            while data := await reader.read(65536):
                for request in conn.receive_data(data):
                    body = await self._answer(request)
                    for chunk in encode_response(request.api_key, request.api_version,
                                                 request.correlation_id, body):
                        writer.write(chunk)
                    await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()

    async def _answer(self, request):
        if request.api_key == ApiKey.API_VERSIONS:
            return {"error_code": 0, "api_keys": _VERSIONS, "throttle_time_ms": 0}
        if request.api_key != ApiKey.FETCH:
            raise AssertionError(f"the scripted leader got an unexpected {request.name}")
        body = request.body
        response = await asyncio.to_thread(self._fetch, body)
        parts = [p for t in response["responses"] for p in t["partitions"]]
        if not any(p["records"] or p["error_code"] or p.get("diverging_epoch")
                   for p in parts):
            await asyncio.sleep(body["max_wait_ms"] / 1000)
            response = await asyncio.to_thread(self._fetch, body)
        return response

    def _fetch(self, body):
        topics = []
        for t in body["topics"]:
            parts = [self._partition(t["topic"], p) for p in t["partitions"]]
            topics.append({"topic": t["topic"], "partitions": parts})
        return {"throttle_time_ms": 0, "error_code": 0, "session_id": 0, "responses": topics}

    def _partition(self, topic, p):
        key = (topic, p["partition"])
        self.fetched.append((*key, p["fetch_offset"], p["last_fetched_epoch"]))
        entry = {"partition_index": p["partition"], "error_code": ErrorCode.NONE,
                 "high_watermark": -1, "last_stable_offset": -1, "log_start_offset": -1,
                 "aborted_transactions": None, "preferred_read_replica": -1, "records": b""}
        log = self.logs.get(key)
        code = self.errors.get(key)
        if code is None and log is None:
            code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        current = p["current_leader_epoch"]
        if code is None and current >= 0 and current != self.leader_epoch:
            code = ErrorCode.FENCED_LEADER_EPOCH if current < self.leader_epoch \
                else ErrorCode.UNKNOWN_LEADER_EPOCH
        if code is not None:
            entry["error_code"] = code
            return entry
        start, end, hw = log.start_offset, log.end_offset, log.high_watermark
        entry.update(high_watermark=hw, last_stable_offset=hw, log_start_offset=start)
        offset = p["fetch_offset"]
        code, diverging = diverging_epoch_for(log.epochs, p["last_fetched_epoch"], offset,
                                              start, end)
        if diverging is not None:
            entry["diverging_epoch"] = {"epoch": diverging.epoch,
                                        "end_offset": diverging.end_offset}
        elif code or offset < start or offset > end:
            entry["error_code"] = code or ErrorCode.OFFSET_OUT_OF_RANGE
        elif offset < end:
            entry["records"] = log.read_batches(offset, p["partition_max_bytes"],
                                                isolation=Isolation.LOG_END)
        return entry
