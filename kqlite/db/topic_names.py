"""Kafka's rules for topic names, and file names that stay within a file system's limit.

A topic name becomes a directory name (``<topic>-<partition>``) and part of other file
names, so a name that breaks the rules could reach outside the data dir (``../x``) or
past the file system's limit. Every way in -- the Database, the topic store, the
broker -- checks it here first: :func:`check_topic_name` raises
:class:`InvalidTopicError`, Kafka's ``InvalidTopicException``.

Kafka's limit of 249 characters leaves room for ``-<partition>`` within the usual
255-byte limit of a file name. Files kqlite names after a topic with a longer suffix
are named by :func:`fit_file_name`, which shortens the topic part as Kafka shortens
it in the names of deleted partition directories (``LocalLog.logDeleteDirName``).
"""

from ..errors import ConfigError, UnknownTopicError

__all__ = ["InvalidTopicError", "MAX_NAME_LENGTH", "MAX_FILE_NAME", "valid_topic_name",
           "check_topic_name", "fit_file_name"]

MAX_NAME_LENGTH = 249     # Kafka's Topic.MAX_NAME_LENGTH
MAX_FILE_NAME = 255       # NAME_MAX of ext4, xfs, btrfs, tmpfs (bytes)

_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


class InvalidTopicError(ConfigError, UnknownTopicError):
    """A topic name that breaks Kafka's rules (Kafka's InvalidTopicException).

    It is a ConfigError, as creating such a topic always raised, and an
    UnknownTopicError, as no topic of that name can exist: code that looks a topic up
    and handles UnknownTopicError keeps working."""


def _problem(name):
    if not isinstance(name, str):
        return f"a topic name is a string, not {type(name).__name__}"
    if not name:
        return "a topic name cannot be empty"
    if name in (".", ".."):
        return f"a topic cannot be named {name!r}"
    if len(name) > MAX_NAME_LENGTH:
        return f"a topic name has at most {MAX_NAME_LENGTH} characters, not {len(name)}"
    bad = sorted(set(name) - _NAME_CHARS)
    if bad:
        return (f"a topic name contains only ASCII letters, digits, '.', '_' and '-'; "
                f"not {''.join(bad)!r}")
    return None


def valid_topic_name(name):
    """Kafka's rule: 1-249 of [a-zA-Z0-9._-], and not "." or ".."."""
    return _problem(name) is None


def check_topic_name(name):
    """Raise InvalidTopicError unless ``name`` is a valid topic name."""
    problem = _problem(name)
    if problem is not None:
        shown = name[:60] + "..." if isinstance(name, str) and len(name) > 60 else name
        raise InvalidTopicError(f"invalid topic name {shown!r}: {problem}")


def fit_file_name(topic, suffix, spare=0):
    """``topic + suffix``, with the topic shortened when the whole would pass
    MAX_FILE_NAME bytes less ``spare`` (room for a temporary file's suffix); the
    suffix must then say what the file is for by itself."""
    room = MAX_FILE_NAME - spare - len(suffix.encode())
    return topic[:max(room, 0)] + suffix
