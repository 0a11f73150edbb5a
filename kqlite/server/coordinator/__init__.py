"""The broker's coordinators: each answers for the keys of one kind and keeps their state
in a compacted internal topic of Kafka's, through the runtime they share.

- ``runtime.py``: the runtime (a key's partition, loading and unloading state partitions
  as their leadership moves, appends with acks and the coordinator's error table, the
  answers NOT_COORDINATOR and COORDINATOR_LOAD_IN_PROGRESS), composed of
  ``ownership.py`` (pure: the state partitions this broker owns), ``placement.py`` (who
  leads each one, for FindCoordinator), ``state_log.py`` (how their records are written
  and read) and ``state_topic.py`` (each state topic's settings);
- ``group/``: the group coordinator, over ``__consumer_offsets``;
- ``txn/``: the transaction coordinator, over ``__transaction_state``: its state machine,
  its state topic in ``state_topic.py``, its records in kqlite/format
  (``transaction_records``) and, for the single broker, the data dir's store of its state
  in kqlite/db (``transaction_state``), which embedded processes share.
"""
