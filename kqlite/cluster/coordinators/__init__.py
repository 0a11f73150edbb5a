"""The coordinators' share of the cluster: where each state topic is led (``placement``:
FindCoordinator from the metadata cache, the topic created through ZooKeeper when
missing) and the leadership changes fed to the coordinator runtimes (``roles``). The
coordinators themselves, and their runtime, are the server's (kqlite/server/coordinator/).
"""
