"""``chaos.jsonl``: one JSON line per fault the proxy injected (read by ``rtalab check``).

Kinds: ``duplicate`` (request_guid, rpc_id, delay_s, copy_status), ``reorder`` (a
stream whose events were held back: events, delayed, out_of_order), ``drop`` (a
connection cut mid-stream after ``events`` events), ``lost`` (a request never
forwarded), ``blackhole`` (a request or connection held during an outage),
``swallowed`` (stream events dropped during a downlink outage), ``refused``
(connections reset at a refuse outage), ``outage-start`` / ``outage-end``.
Every line has ``t`` (unix time), ``kind``, ``binding`` (``sse``/``ws``/``tcp``),
``request_guid`` and ``rpc_id`` (``""`` where unknown).  Lines are flushed as
written, so a killed proxy loses nothing already injected.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any


class ChaosLedger:
    """Append-only JSONL writer (thread-safe, flushed per line)."""

    def __init__(self, path: str | Path | None):
        self.path = Path(path) if path else None
        self._lock = threading.Lock()
        self._f = None
        self.counts: dict[str, int] = {}
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._f = self.path.open("a", encoding="utf-8")

    def record(self, kind: str, *, binding: str = "", request_guid: str = "",
               rpc_id: Any = "", **extra: Any) -> None:
        """Append one injection."""
        row = {"t": time.time(), "kind": kind, "binding": binding,
               "request_guid": request_guid or "", "rpc_id": "" if rpc_id is None else
               str(rpc_id), **extra}
        line = json.dumps(row, default=str) + "\n"
        with self._lock:
            self.counts[kind] = self.counts.get(kind, 0) + 1
            if self._f is not None:
                self._f.write(line)
                self._f.flush()

    def close(self) -> None:
        """Close the file."""
        with self._lock:
            if self._f is not None:
                self._f.close()
                self._f = None
