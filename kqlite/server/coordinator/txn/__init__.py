"""The transaction coordinator: Kafka's transactions (KIP-98, KIP-360, KIP-447, KIP-890
part 1) over ``__transaction_state``, on the coordinator runtime its sibling ``group/``
uses.

``metadata.py`` holds a transactional id's metadata and the state table it moves through
(prepare, log, complete); ``transitions.py`` is what each request does to it, as pure
functions of (metadata, request, now); ``coordinator.py`` (``TransactionCoordinator``) is
the asyncio shell that logs every change before acting on it, answers the requests, sends
the markers and runs the timeout abort and the id expiration, and is the coordinator
runtime's state of ``__transaction_state``. ``markers.py`` holds the marker channel's
interface, the single broker's channel and what each partition's answer means;
``append_errors.py`` Kafka's answers to a failed append of the state; ``config.py`` the
coordinator's settings. The records are kqlite/format's (``transaction_records``), and
the data dir's store of them, shared with embedded processes, is kqlite/db's
(``transaction_state``).
"""
