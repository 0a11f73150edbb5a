"""Adoption: a data dir written by the embedded API (or a single ``kqlite serve``)
becomes one cluster broker's data, its topics the cluster's (plan.py the rules,
journal.py the crash-safe record of one adoption, steps.py the run, carry_offsets.py the
committed offsets brought into the cluster's ``__consumer_offsets``); and the way back,
detach.py."""
