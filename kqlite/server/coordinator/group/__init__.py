"""The group coordinator: Kafka's classic consumer-group protocol.

``transitions.py`` is the table of what each request does in each state of a group,
``state_machine.py`` runs it for one group (pure: no I/O, no clock), ``events.py`` holds
its inputs and outputs, ``members.py`` a group's members and their stored form.
``coordinator.py`` (``GroupCoordinator``) is the asyncio shell that feeds every group its
requests and timeouts, stores their records and is the coordinator runtime's state of
``__consumer_offsets``; ``offsets.py`` keeps the groups' committed offsets, ``records.py``
builds and reads their records, ``append_errors.py`` holds Kafka's answers to a failed
append.
"""
