"""The console's bounds, and the checks that turn a request's text into bounded values.

Theory of operation. Every number a request carries (a partition, an offset, a
timestamp, a count, a search window) and every name (a topic, a group) passes a function
here before anything reads storage. A value out of bounds is refused
(:class:`BadRequest`, answered 400 with what was wrong), never clamped silently:

  value                 rule                                        refusal
  topic                 Kafka's topic-name rule (db/topic_names.py)  400
  group                 1-MAX_NAME characters, printable            400
  partition             integer 0 <= p < 2**31                      400
  offset, timestamp     integer 0 <= x < 2**63                      400
  count                 1..MAX_RECORDS                              400
  window                1..MAX_WINDOW                               400
  search                1..MAX_SEARCH bytes                         400
  partition page start  0 <= first < 2**31                          400

Topic names are checked with Kafka's rule before they become a path, so no request
can name a file outside the data dir.
"""

from typing import Mapping, Optional

from ..db.topic_names import valid_topic_name

__all__ = ["BadRequest", "topic", "group", "integer", "optional_integer", "count",
           "window", "search", "MAX_RECORDS", "MAX_WINDOW", "MAX_SEARCH",
           "PARTITIONS_PER_PAGE", "MAX_VALUE_SHOWN", "MAX_GROUP_PARTITIONS"]

DEFAULT_RECORDS = 20
MAX_RECORDS = 200              # records on one page of messages
DEFAULT_WINDOW = 1000
MAX_WINDOW = 10000             # records one search looks at
MAX_SEARCH = 256               # bytes of a search string
MAX_VALUE_SHOWN = 4096         # bytes of a key, value or header value kept for display
MAX_HEADERS_SHOWN = 32         # headers of one record shown
PARTITIONS_PER_PAGE = 100      # partitions of a topic on one page
MAX_PARTITIONS_SIZED = 10000   # partition directories the topic list sizes, in all
MAX_TOPICS = 5000              # topics the topic list shows
MAX_CLUSTER_ROWS = 1000        # partitions the cluster page lists (problems first)
MAX_GROUP_PARTITIONS = 500     # partitions of a group whose lag one page shows
MAX_NAME = 249                 # a group name, as long as a topic name may be
MAX_GROUPS = 1000              # embedded groups one page lists
MAX_MEMBERS = 1000             # members of one embedded group shown
MAX_MEMBER_FILE = 1 << 16      # bytes of an embedded member's file read
MAX_TEST_RECORD = 16384        # bytes of a test record's key plus value
MAX_NEW_PARTITIONS = 1000      # partitions of a topic created from the console
_INT32 = 1 << 31
_INT64 = 1 << 63


class BadRequest(ValueError):
    """A request value outside its bounds (the message names it)."""


def topic(text: Optional[str]) -> str:
    if text is None or not valid_topic_name(text):
        raise BadRequest("a topic name is 1-249 of ASCII letters, digits, '.', '_', '-'")
    return text


def group(text: Optional[str]) -> str:
    if not text or len(text) > MAX_NAME or not text.isprintable():
        raise BadRequest(f"a group id is 1-{MAX_NAME} printable characters")
    return text


def integer(text: Optional[str], name: str, bound: int = _INT64) -> int:
    # isascii: str.isdigit() also takes digits int() refuses, such as "²"
    if text is None or not (text.isascii() and text.isdigit()) or len(text) > 19:
        raise BadRequest(f"{name} must be a whole number")
    value = int(text)
    if value >= bound:
        raise BadRequest(f"{name} must be below {bound}")
    return value


def optional_integer(query: Mapping[str, str], name: str, bound: int = _INT64) -> Optional[int]:
    text = query.get(name, "")
    return None if text == "" else integer(text, name, bound)


def partition(text: Optional[str]) -> int:
    return integer(text, "partition", _INT32)


def _bounded(text: Optional[str], name: str, default: int, most: int, unit: str) -> int:
    # An absent value takes its default; a given one is refused outside 1..most.
    if not text:
        return default
    value = integer(text, name)
    if not 1 <= value <= most:
        raise BadRequest(f"{name} is 1-{most}{unit}")
    return value


def count(text: Optional[str]) -> int:
    return _bounded(text, "count", DEFAULT_RECORDS, MAX_RECORDS, "")


def window(text: Optional[str]) -> int:
    return _bounded(text, "window", DEFAULT_WINDOW, MAX_WINDOW, " records")


def search(text: Optional[str]) -> Optional[bytes]:
    if not text:
        return None
    data = text.encode()
    if len(data) > MAX_SEARCH:
        raise BadRequest(f"a search is at most {MAX_SEARCH} bytes")
    return data
