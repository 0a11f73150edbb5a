"""``kqlite serve`` moves what its start-up built out of the cyclic collector's full
passes (kqlite/cli/serve.py, ``_freeze_start_up_objects``): what a full pass walks
afterwards is what the broker allocates later, not the whole heap."""

import gc

from kqlite.cli import serve


def test_start_up_objects_are_out_of_the_collectors_full_passes():
    start_up = [[n] for n in range(50_000)]      # a started broker's state (lists: tracked)
    walked_before = len(gc.get_objects())
    assert walked_before > len(start_up)
    try:
        serve._freeze_start_up_objects()
        assert gc.get_freeze_count() >= len(start_up)
        assert len(gc.get_objects()) < walked_before - len(start_up)
        later = [[n] for n in range(10)]
        assert any(o is later[0] for o in gc.get_objects())    # still collected
    finally:
        gc.unfreeze()
    assert start_up and later
