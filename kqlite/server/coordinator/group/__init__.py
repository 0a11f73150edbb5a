"""The group coordinator: Kafka's classic consumer-group protocol.

``transitions.py`` is the table of what each request does in each state of a group,
``state_machine.py`` runs it for one group (pure: no I/O, no clock), ``events.py`` holds
its inputs and outputs, ``members.py`` a group's members and their stored form, and
``coordinator.py`` (``GroupCoordinator``) is the asyncio shell that feeds every group its
requests and timeouts and stores their records.
"""
