"""Who a partition leader asks whether a partition is in a producer's transaction (KIP-890
part 1): the seam between the partition side (Produce, TxnOffsetCommit) and the
transaction coordinator of the producer's transactional id.

Theory of operation. Before a producer's first transactional batch goes to a partition
where it has no transaction open, the leader takes a verification guard from the log and
asks the id's coordinator ``verify(id, producer id, epoch, partitions)``: for each
partition NONE (it is in the transaction) or the coordinator's refusal (Kafka's
``handleVerifyPartitionsInTransaction``). Kafka's leader asks through its
AddPartitionsToTxnManager, an AddPartitionsToTxn v4 VerifyOnly request to the
coordinator's broker, even when that is itself. Here:

- :class:`LocalVerification`, the single broker's: it coordinates every id, so it asks
  its own coordinator directly;
- a cluster broker's asks its own coordinator when it coordinates the id, else sends the
  request to the broker that does (kqlite/cluster/coordinators/txn_verification.py).

The coordinator's own answer to AddPartitionsToTxn v4 never goes through this seam
(``TransactionCoordinator.verify_partitions``), so a verification never loops between
brokers.
"""

import abc

__all__ = ["Verification", "LocalVerification"]


class Verification(abc.ABC):
    """The interface; see the module docstring."""

    @abc.abstractmethod
    async def verify(self, transactional_id, producer_id, producer_epoch, partitions):
        """``{(topic, partition): error code}`` for every partition of ``partitions``."""


class LocalVerification(Verification):
    """The broker's own transaction coordinator answers (``broker.transactions``)."""

    def __init__(self, broker):
        self.broker = broker

    async def verify(self, transactional_id, producer_id, producer_epoch, partitions):
        return await self.broker.transactions.verify_partitions(
            transactional_id, producer_id, producer_epoch, partitions)
