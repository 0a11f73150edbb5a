"""Fault-injection harness for the ZooKeeper-mode cluster (issue 15): real processes,
a nemesis, a Jepsen-style history and its checker.

Layout
------
``cluster.py``     FaultCluster: its own ZooKeeper process and N ``kqlite serve
                   --zookeeper`` brokers, started in parallel, every link proxied
``proxy.py``       ProxyNet: the TCP proxies (one asyncio loop on a thread of the test
                   process) and their cut/heal rules
``broker_main.py`` the brokers' entry point: binds their outgoing connections to their
                   own loopback address, then runs ``kqlite.cli`` unchanged
``nemesis.py``     the faults, each waiting for the cluster's visible reaction
``history.py``     the history of invocations and completions
``workload.py``    confluent-kafka producers/consumers that write the history
``checker.py``     the pure checker (jepsen-io/redpanda's anomaly names)
``scenario.py``    one run: topic, workload, faults, final read, check
``exactly_once.py`` the pure exactly-once checker of transactions and of a
                   consume-transform-produce pipeline (issue 26)
``txn_workload.py`` transactional producers and the pipeline that write its history
``txn_scenario.py`` one transactional run: topics, workload, faults, final reads, checks
``power_loss.py``  power loss of one broker: the undo journal a broker keeps with
                   ``KQLITE_FAULTS_POWER_LOSS=1`` (through the storage file-system
                   seam), its replay after SIGKILL, and the ``power_loss`` and
                   ``power_loss_bounce`` nemesis

Design: how partitions are made on loopback alone
-------------------------------------------------
A broker finds its peers through the one address it advertises in ``/brokers/ids/N``,
the same for every peer and every client, so a proxy *per link* cannot be addressed.
Instead there is one proxy per *destination* and it tells the *source* from the peer
address: broker i listens on 127.0.0.(10+i), advertises its proxy at 127.0.0.(20+i),
and opens its outgoing connections from 127.0.0.(10+i). Kafka has no option for the
local address of those connections (and kqlite copies Kafka's options), so the test-only
entry point ``broker_main.py`` wraps ``asyncio.open_connection`` to bind it; nothing in
``kqlite/`` changes. Clients connect from 127.0.0.1. ZooKeeper is reached by each broker
through its own proxy (127.0.0.(30+i)), so one broker's session can be cut alone. That
gives real, per-pair and per-direction (of connection set-up) partitions between
brokers, between a broker and ZooKeeper and between clients and a broker, with nothing
but loopback: no network namespaces, no iptables, no root.

A cut proxy behaves as a firewall dropping packets: new connections are accepted and
then hang, open ones stop carrying bytes; at heal the stalled ones are reset. Processes
are SIGKILLed (crash), SIGTERMed (controlled shutdown), SIGSTOPped past their ZooKeeper
session and SIGCONTed; ZooKeeper is restarted on its port and data.
"""
