"""Mirroring between clusters: ``kqlite mirror`` and its library entry point.

Theory of operation. A mirror consumes topics of a source cluster and produces them into a
target cluster, any Kafka-protocol brokers on either side, in one of two modes: MM2's
(topics renamed by MM2's replication policies, MM2's offset syncs, checkpoints and
heartbeats in MM2's exact record formats, consumer group offsets translated
conservatively as Kafka 3.5+ does) or offset-preserving (mirror topics holding the
source's batches at the source's offsets, group offsets copied as they are; a kqlite
target). The modules, lowest first: ``mm2_records`` (the three record codecs),
``policy`` (names and cycles), ``selection`` (include/exclude patterns),
``offset_syncs`` (emission and translation rules), ``plan`` (what to copy now),
``batches`` (what of a fetched partition is copied), ``progress`` (positions and lag),
``metrics`` (Prometheus), ``settings``, ``client`` (the Kafka client on the inter-broker
connection), ``transactions`` (the exactly-once producer on the target), ``flow`` (what
both modes share), ``runner`` (the running MM2 mirror) and ``preserve`` (the
offset-preserving mirror and promote). docs/mirroring.md is the user's guide.

:func:`run_mirror` runs one mirror until it is stopped::

    mirror = Mirror(MirrorSettings(source="a:9092", target="b:9092", topics="orders.*"))
    await mirror.run()          # mirror.stop() from elsewhere ends it
"""

from typing import Union

from .preserve import PreservingMirror, chosen_mode, promote
from .runner import Mirror, positions_topic
from .settings import MirrorSettings

__all__ = ["Mirror", "PreservingMirror", "MirrorSettings", "run_mirror", "chosen_mode",
           "promote", "positions_topic", "mode_of"]


async def mode_of(settings: MirrorSettings) -> str:
    """The mode a mirror with ``settings`` runs in: mm2 for ``exactly_once`` (MM2's
    KIP-618 way) when no mode is set, else :func:`chosen_mode`."""
    if settings.exactly_once and not settings.mode:
        return "mm2"
    return await chosen_mode(settings)


async def run_mirror(settings: MirrorSettings) -> Union[Mirror, PreservingMirror]:
    """Run a mirror with ``settings`` (its mode chosen when unset) until it is stopped;
    the stopped mirror."""
    mode = await mode_of(settings.validate())
    mirror: Union[Mirror, PreservingMirror]
    if mode == "preserve":
        mirror = PreservingMirror(settings)
    else:
        mirror = Mirror(settings)
    await mirror.run()
    return mirror
