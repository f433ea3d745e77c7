"""Strict JSON text at the server's boundary: UTF-8, well-formed, bounded depth, valid Unicode.

``json.loads`` accepts ``"\\ud800"`` (an unpaired surrogate escape) and builds a
``str`` that cannot be encoded back to UTF-8: any answer echoing it (a JSON-RPC
``id``, a contextId, a text part) would then fail to serialise (HTTP 500, a cut
SSE stream, a dead WebSocket).  :func:`load_strict` refuses such text up front,
like invalid UTF-8 and nesting too deep for the decoder, with a :class:`BadJson`
saying which (the caller maps it to its binding's stable error).
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal

# A \uD800-\uDFFF escape somewhere (cheap pre-check; pairs are checked on the decoded value).
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


class BadJson(ValueError):
    """The body is not strict JSON: ``kind`` is ``parse`` (not UTF-8 / not JSON / too deep)
    or ``unicode`` (an unpaired surrogate escape)."""

    def __init__(self, kind: Literal["parse", "unicode"], message: str):
        super().__init__(message)
        self.kind = kind


def has_lone_surrogate(value: Any) -> bool:
    """True if any string (or key) in the decoded ``value`` is not encodable as UTF-8."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            try:
                v.encode("utf-8")
            except UnicodeEncodeError:
                return True
        elif isinstance(v, dict):
            stack.extend(v.keys())
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
    return False


def load_strict(raw: bytes | str) -> Any:
    """Decode ``raw`` (bytes must be UTF-8); raise :class:`BadJson` if it is not strict JSON."""
    if isinstance(raw, str):
        try:
            data = raw.encode("utf-8")
        except UnicodeEncodeError:
            raise BadJson("unicode", "text is not valid Unicode") from None
        text = raw
    else:
        data = raw
        try:  # strict: json.loads(bytes) would let encoded surrogates (ED A0 80) through
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise BadJson("parse", f"Parse error: body is not UTF-8 ({e.reason} at byte "
                                   f"{e.start})") from None
    try:
        value = json.loads(text)
    except RecursionError:
        raise BadJson("parse", "Parse error: nesting too deep") from None
    except ValueError as e:  # JSONDecodeError
        raise BadJson("parse", f"Parse error: {str(e)[:160]}") from None
    if _SURROGATE_ESCAPE.search(data) and has_lone_surrogate(value):
        raise BadJson("unicode", "strings must be valid Unicode (unpaired surrogate)")
    return value
