"""Coordinators placed in the cluster: ``groups``, the group coordinator whose groups live
in replicated ``__consumer_offsets`` partitions led by their coordinator.
"""
