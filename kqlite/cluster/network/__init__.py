"""Requests to other brokers: ``broker_client`` (one asyncio connection around the sans-I/O
``kqlite.protocol.ClientConnection``, with timeouts) and ``channels`` (ordered per-broker
request queues with reconnect and backoff, as Kafka's ControllerChannelManager). They know
brokers by address only: no ZooKeeper, no controller, no partition.
"""
