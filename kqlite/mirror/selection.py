"""Which topics and groups a mirror copies: include and exclude regular expressions.

Theory of operation. As MM2's ``DefaultTopicFilter`` and ``DefaultGroupFilter``: a name is
chosen when it matches the include pattern in full and no exclude pattern. The excludes
always hold MM2's defaults (``topics.exclude``: ``.*[-.]internal``, ``.*\\.replica``,
``__.*``; ``groups.exclude``: ``console-consumer-.*``, ``connect-.*``, ``__.*``) besides
the user's. A pattern that does not compile is refused before anything is asked of a
broker (:class:`MirrorConfigError`).
"""

import re
from typing import Optional, Pattern, Sequence

from ..errors import KqliteError

__all__ = ["NameFilter", "MirrorConfigError", "topic_filter", "group_filter"]

_TOPICS_EXCLUDE = (r".*[\-\.]internal", r".*\.replica", r"__.*")
_GROUPS_EXCLUDE = (r"console-consumer-.*", r"connect-.*", r"__.*")


class MirrorConfigError(KqliteError, ValueError):
    """A mirror setting that cannot be used (a bad pattern, an unknown mode or policy)."""


def _compile(pattern: str, what: str) -> Pattern[str]:
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise MirrorConfigError(f"{what} {pattern!r} is not a regular expression: "
                                f"{exc}") from None


class NameFilter:
    """``include`` matched in full and none of ``excludes``."""

    def __init__(self, include: str, excludes: Sequence[str], what: str) -> None:
        self.include = _compile(include, f"{what} pattern")
        self.excludes = [_compile(p, f"{what} exclude pattern") for p in excludes]

    def __call__(self, name: str) -> bool:
        if not self.include.fullmatch(name):
            return False
        return not any(p.fullmatch(name) for p in self.excludes)


def topic_filter(include: str, exclude: Optional[str] = None) -> NameFilter:
    return NameFilter(include, _TOPICS_EXCLUDE + ((exclude,) if exclude else ()), "topics")


def group_filter(include: str, exclude: Optional[str] = None) -> NameFilter:
    return NameFilter(include, _GROUPS_EXCLUDE + ((exclude,) if exclude else ()), "groups")
