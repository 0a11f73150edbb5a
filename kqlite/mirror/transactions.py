"""The mirror's transactional producer on the target (``--exactly-once``, MM2 mode).

Theory of operation. KIP-618 (MM2's exactly-once since Kafka 3.5) writes a source task's
records and its source positions in one producer transaction. The mirror does the same
with one :class:`TargetProducer`, speaking Kafka's client side of the transaction APIs
over the mirror's :class:`~kqlite.mirror.client.ClusterClient`:

- **Its id** is :func:`transactional_id`: source alias, target alias and the mirror's own
  name (``--mirror-id``), so the same mirror started again has the same id, and its
  InitProducerId *fences* the one before it (bumps the epoch and aborts its open
  transaction, the coordinator answering CONCURRENT_TRANSACTIONS until the abort's markers
  are written).
- **A round** is :meth:`TargetProducer.begin` (local: sequences continue within an epoch),
  :meth:`~TargetProducer.add_partitions` (AddPartitionsToTxn v0-3, every partition the
  round will write, before its first Produce), transactional Produce batches stamped by
  :meth:`~TargetProducer.stamp` (producer id, epoch, a base sequence per partition that
  grows by the records sent, wrapping at 2^31 as Kafka's ``incrementSequence``) and
  :meth:`~TargetProducer.end` (EndTxn).
- **Aborting** a round (:meth:`~TargetProducer.abort`) is EndTxn(abort), then
  :meth:`~TargetProducer.init` again with the producer's id and epoch (KIP-360): the epoch
  is bumped, so every partition's sequence starts again at 0, and a producer another
  mirror fenced learns it here (PRODUCER_FENCED) instead of fencing the other back.

Kafka's TransactionManager and librdkafka's ``rdkafka_txnmgr.c`` sort the coordinator's
answers into kinds; :func:`kind_of` is that table (Produce answers are the runner's: any
error there aborts the round):

=================================  ==========  =============================================
code                               kind        what the producer does
=================================  ==========  =============================================
NONE                               DONE        goes on
NOT_COORDINATOR,                   RELOCATE    FindCoordinator again, the same request
COORDINATOR_NOT_AVAILABLE
COORDINATOR_LOAD_IN_PROGRESS,      RETRY       the same request after a pause (backing off
CONCURRENT_TRANSACTIONS,                       from 50 ms to 1 s, until ``timeout``)
UNKNOWN_TOPIC_OR_PARTITION
PRODUCER_FENCED,                   FENCED      :class:`MirrorFencedError`: another mirror
INVALID_PRODUCER_EPOCH                         with this id runs; this one stops
UNKNOWN_PRODUCER_ID,               ABORTABLE   :class:`MirrorAbortableError`: the round is
INVALID_PRODUCER_ID_MAPPING,                   aborted (``init`` with id and epoch)
TRANSACTION_ABORTABLE
any other (authorization,          FATAL       :class:`MirrorTransactionsError`: the mirror
INVALID_TXN_STATE, ...)                        stops with the coordinator's code
=================================  ==========  =============================================

A target that serves no transactions answers FindCoordinator of a transactional id with
TRANSACTIONAL_ID_AUTHORIZATION_FAILED (a kqlite broker without a coordinator, as Kafka's
clients expect) or does not advertise the APIs: :class:`MirrorTransactionsError` before
anything is copied.
"""

import asyncio
import time
from typing import Any, Callable, Dict, Iterable, Optional, Tuple

from ..cluster.network.broker_client import UnsupportedVersionError
from ..errors import KqliteError
from ..protocol import ApiKey
from ..protocol.errors import ErrorCode
from .client import ClusterClient, MirrorClientError

__all__ = ["TargetProducer", "MirrorFatalError", "MirrorFencedError",
           "MirrorTransactionsError", "MirrorAbortableError", "transactional_id", "kind_of",
           "next_sequence", "TRANSACTION_TIMEOUT_MS"]

# Kafka's producer default transaction.timeout.ms: a mirror killed mid-round and not
# started again leaves its transaction open this long before the coordinator aborts it.
TRANSACTION_TIMEOUT_MS = 60_000
_TRANSACTIONAL_KEY = 1               # WIRE: FindCoordinator key type of a transactional id
_SEQUENCE_MODULUS = 1 << 31          # Kafka's sequences wrap after Integer.MAX_VALUE

DONE, RELOCATE, RETRY, FENCED, ABORTABLE, FATAL = (
    "done", "relocate", "retry", "fenced", "abortable", "fatal")
_KINDS = {
    ErrorCode.NONE: DONE,
    ErrorCode.NOT_COORDINATOR: RELOCATE,
    ErrorCode.COORDINATOR_NOT_AVAILABLE: RELOCATE,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS: RETRY,
    ErrorCode.CONCURRENT_TRANSACTIONS: RETRY,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: RETRY,
    ErrorCode.PRODUCER_FENCED: FENCED,
    ErrorCode.INVALID_PRODUCER_EPOCH: FENCED,
    ErrorCode.UNKNOWN_PRODUCER_ID: ABORTABLE,
    ErrorCode.INVALID_PRODUCER_ID_MAPPING: ABORTABLE,
    ErrorCode.TRANSACTION_ABORTABLE: ABORTABLE,
}


class MirrorFatalError(KqliteError):
    """The mirror cannot go on; :meth:`~kqlite.mirror.Mirror.run` raises it. ``code``:
    the Kafka error code that said so, if one did."""

    def __init__(self, message: str, code: Optional[int] = None) -> None:
        super().__init__(message)
        self.code = code


class MirrorFencedError(MirrorFatalError):
    """A newer mirror with the same transactional id fenced this one."""


class MirrorTransactionsError(MirrorFatalError):
    """The target refused a transaction for a reason asking again will not change."""


class MirrorAbortableError(MirrorClientError):
    """The round's transaction must be aborted (and the producer's epoch bumped)."""

    def __init__(self, message: str, code: Optional[int] = None) -> None:
        super().__init__(message, code, retriable=True)


def transactional_id(source_alias: str, target_alias: str, mirror_id: str) -> str:
    """The mirror's transactional id on the target (aliases hold no '.', so it is
    unambiguous)."""
    return f"kqlite-mirror.{source_alias}.{target_alias}.{mirror_id}"


def kind_of(code: int) -> str:
    """The kind of a transaction API's answer ``code``; see the module docstring."""
    return _KINDS.get(code, FATAL)


def next_sequence(sequence: int, count: int) -> int:
    """The base sequence after ``count`` records from ``sequence`` (Kafka's
    DefaultRecordBatch.incrementSequence: past Integer.MAX_VALUE it starts at 0)."""
    return (sequence + count) % _SEQUENCE_MODULUS


def _name(code: int) -> str:
    return str(getattr(ErrorCode.for_code(code), "name", code))


class TargetProducer:
    """One transactional id on the target; see the module docstring. ``sleep`` and
    ``clock`` are passed in so that the retry pacing is a function of them."""

    def __init__(self, cluster: ClusterClient, txn_id: str, *, timeout: float = 30.0,
                 transaction_timeout_ms: int = TRANSACTION_TIMEOUT_MS,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], Any] = asyncio.sleep) -> None:
        self.cluster = cluster
        self.transactional_id = txn_id
        self.timeout = timeout
        self.transaction_timeout_ms = transaction_timeout_ms
        self.clock = clock
        self.sleep = sleep
        self.producer_id = -1
        self.epoch = -1
        self.sequences: Dict[Tuple[str, int], int] = {}
        self._coordinator: Optional[Tuple[str, int]] = None

    # -- the coordinator -----------------------------------------------------------------

    async def _find_coordinator(self) -> Tuple[str, int]:
        if self._coordinator is None:
            body = await self.cluster.any_request(ApiKey.FIND_COORDINATOR, {
                "key": self.transactional_id, "key_type": _TRANSACTIONAL_KEY}, (1, 3))
            code = body["error_code"]
            if code == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
                raise self._refused(f"FindCoordinator answered {_name(code)}")
            if kind_of(code) in (RELOCATE, RETRY):
                raise MirrorClientError(f"{self.cluster.name}: FindCoordinator of "
                                        f"{self.transactional_id!r}: {_name(code)}", code)
            if code:
                raise MirrorTransactionsError(f"{self.cluster.name}: FindCoordinator of "
                                              f"{self.transactional_id!r}: {_name(code)}")
            address = (body["host"], body["port"])
            try:
                conn = await self.cluster.connection(address)
                for api, versions in ((ApiKey.INIT_PRODUCER_ID, None),
                                      (ApiKey.ADD_PARTITIONS_TO_TXN, (0, 3)),
                                      (ApiKey.END_TXN, None)):
                    conn.version_for(api, versions)
            except UnsupportedVersionError as exc:
                raise self._refused(str(exc)) from None
            except (OSError, KqliteError) as exc:
                raise MirrorClientError(f"{self.cluster.name}: {exc}",
                                        retriable=True) from None
            self._coordinator = address
        return self._coordinator

    def _refused(self, why: str) -> MirrorTransactionsError:
        return MirrorTransactionsError(
            f"{self.cluster.name} does not serve transactions to this mirror ({why}): "
            f"--exactly-once needs a target with a transaction coordinator (a kqlite broker "
            f"or cluster, Kafka 0.11+) and, with ACLs, WRITE on the transactional id "
            f"{self.transactional_id!r}")

    async def _coordinated(self, api_key: ApiKey, body: Dict[str, Any], what: str,
                           versions: Optional[Tuple[int, int]] = None,
                           code_of: Optional[Callable[[Dict[str, Any]], int]] = None
                           ) -> Dict[str, Any]:
        """The coordinator's answer to ``body``, asked again as :func:`kind_of` says."""
        deadline = self.clock() + self.timeout
        pause = 0.05
        while True:
            try:
                address = await self._find_coordinator()
                answer = await self.cluster.request(address, api_key, body, versions)
                code = answer["error_code"] if code_of is None else code_of(answer)
            except MirrorClientError as exc:
                if not exc.retriable:
                    raise
                self._coordinator = None
                code, answer = ErrorCode.COORDINATOR_NOT_AVAILABLE, {}
            kind = kind_of(code)
            if kind == DONE:
                return answer
            message = f"{self.cluster.name}: {what} of {self.transactional_id!r}: {_name(code)}"
            if kind == FENCED:
                raise MirrorFencedError(
                    f"{message}: another mirror with the same transactional id (the same "
                    f"source alias, target alias and --mirror-id) started and fenced this "
                    f"one; it stops here, the newer one goes on", code)
            if kind == ABORTABLE:
                raise MirrorAbortableError(message, code)
            if kind == FATAL:
                raise MirrorTransactionsError(message, code)
            if self.clock() + pause > deadline:
                raise MirrorClientError(message, code, retriable=True)
            if kind == RELOCATE:
                self._coordinator = None
            await self.sleep(pause)
            pause = min(1.0, pause * 2)

    # -- the transaction -----------------------------------------------------------------

    async def init(self) -> None:
        """InitProducerId: the first one fences an older mirror with this id; later ones
        (after an aborted round) carry this producer's id and epoch (KIP-360). Sequences
        start again at 0."""
        answer = await self._coordinated(ApiKey.INIT_PRODUCER_ID, {
            "transactional_id": self.transactional_id,
            "transaction_timeout_ms": self.transaction_timeout_ms,
            "producer_id": self.producer_id, "producer_epoch": self.epoch},
            "InitProducerId", (0, 5))
        self.producer_id, self.epoch = answer["producer_id"], answer["producer_epoch"]
        self.sequences.clear()

    def stamp(self, tp: Tuple[str, int], count: int) -> Tuple[int, int, int]:
        """``(producer id, epoch, base sequence)`` of the next batch of ``count`` records
        to ``tp``; the partition's sequence moves past them."""
        sequence = self.sequences.get(tp, 0)
        self.sequences[tp] = next_sequence(sequence, count)
        return self.producer_id, self.epoch, sequence

    async def add_partitions(self, tps: Iterable[Tuple[str, int]]) -> None:
        topics: Dict[str, list] = {}
        for topic, partition in sorted(set(tps)):
            topics.setdefault(topic, []).append(partition)
        await self._coordinated(ApiKey.ADD_PARTITIONS_TO_TXN, {
            "v3_and_below_transactional_id": self.transactional_id,
            "v3_and_below_producer_id": self.producer_id,
            "v3_and_below_producer_epoch": self.epoch,
            "v3_and_below_topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]},
            "AddPartitionsToTxn", (0, 3), _partition_code)

    async def produce(self, address: Tuple[str, int], data: Dict[Tuple[str, int], bytes]
                      ) -> Dict[Tuple[str, int], Tuple[int, int]]:
        """Produce of stamped batches inside the transaction (acks=all)."""
        return await self.cluster.produce(address, data,
                                          transactional_id=self.transactional_id)

    async def abort(self) -> None:
        """Ends an aborted round, as Kafka's producer does before it bumps its epoch:
        EndTxn(abort), then InitProducerId with its id and epoch (KIP-360; the
        coordinator refuses that one while the transaction is open). INVALID_TXN_STATE
        to the abort says no transaction is open (none was begun, or the coordinator
        committed it when the EndTxn's answer was lost): then there is nothing to abort."""
        try:
            await self.end(commit=False)
        except MirrorTransactionsError as exc:
            if exc.code != ErrorCode.INVALID_TXN_STATE:
                raise
        await self.init()

    async def end(self, commit: bool) -> None:
        """EndTxn; asked again after a lost answer, as the coordinator answers a commit it
        completed already with NONE."""
        await self._coordinated(ApiKey.END_TXN, {
            "transactional_id": self.transactional_id, "producer_id": self.producer_id,
            "producer_epoch": self.epoch, "committed": commit}, "EndTxn", (0, 4))


def _partition_code(answer: Dict[str, Any]) -> int:
    """AddPartitionsToTxn v0-3 answers per partition: the first code that says why (Kafka
    answers OPERATION_NOT_ATTEMPTED for the partitions beside one that failed)."""
    codes = [r["partition_error_code"] for t in answer["results_by_topic_v3_and_below"]
             for r in t["results_by_partition"] if r["partition_error_code"]]
    why = [c for c in codes if c != ErrorCode.OPERATION_NOT_ATTEMPTED]
    return int((why or codes or [ErrorCode.NONE])[0])
