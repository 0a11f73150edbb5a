"""The coordinators' share of the cluster: where each state topic is led (``placement``:
FindCoordinator from the metadata cache, the topic created through ZooKeeper when
missing), the leadership changes fed to the coordinator runtimes (``roles``) and the
``__consumer_offsets`` records that kqlite's legacy placement left in another partition,
brought in from that partition's leader before a load (``relocation``). The coordinators
themselves, and their runtime, are the server's (kqlite/server/coordinator/).
"""
