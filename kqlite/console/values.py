"""A key, value or header value as the console shows it: text, pretty JSON or hex.

Theory of operation. Bytes are shown in the format asked for; ``auto`` picks JSON when
the bytes parse as a JSON object or array, text when they are UTF-8 without control
characters (other than tab and newline), and hex otherwise. A format that does not fit
the bytes falls back to hex, so nothing undecodable is ever printed as if it were text.
None (a null key or value, a tombstone) is shown as ``null``. The result is plain text;
the page escapes it.
"""

import json
from typing import Any, Optional

__all__ = ["FORMATS", "show"]

FORMATS = ("auto", "text", "json", "hex")


def _hex(data: bytes) -> str:
    return " ".join(data[i:i + 16].hex(" ") for i in range(0, len(data), 16))


def _text(data: bytes) -> Optional[str]:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if any(not c.isprintable() and c not in "\t\n\r" for c in text):
        return None
    return text


def _json(data: bytes) -> Optional[str]:
    text = _text(data)
    if text is None or not text.lstrip()[:1] in ("{", "["):
        return None
    try:
        return json.dumps(json.loads(text), indent=2, ensure_ascii=False)
    except ValueError:
        return None


def show(data: Optional[bytes], fmt: str = "auto") -> tuple[Any, ...]:
    """``(format used, text)`` of ``data`` in ``fmt`` (one of FORMATS)."""
    if data is None:
        return "null", "null"
    if fmt == "hex":
        return "hex", _hex(data)
    if fmt in ("json", "auto"):
        shown = _json(data)
        if shown is not None:
            return "json", shown
        if fmt == "json":
            return "hex", _hex(data)
    text = _text(data)
    if text is not None:
        return "text", text
    return "hex", _hex(data)
