"""Requests to other brokers: ``broker_client`` (one asyncio connection over the sans-I/O
codec, with version negotiation) and ``channels`` (ordered per-broker request queues with
reconnect and backoff, as Kafka's ControllerChannelManager). They know brokers by
address only: no ZooKeeper, no controller, no partition.
"""
