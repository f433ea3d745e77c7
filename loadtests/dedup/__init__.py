"""Dedup (idempotency) stores for the Reasoner: ``open_store(url, window_s)`` picks the backend.

URLs::

    memory                              per-process dict (negative control)
    sqlite:///ABS/PATH.db               SQLite file shared by the workers of one host
    sqlite://REL/PATH.db, sqlite:REL    ... relative to the current directory
    redis://HOST[:PORT][/DB]            Redis (port 6379 by default; rediss://, user:pw@)

Optional query parameters (any backend): ``lease_s`` (in-flight lease, seconds)
and ``on_stale`` (``fail`` | ``reclaim``, see :mod:`rtalab.loadtests.dedup.base`);
SQLite also ``synchronous`` (``normal`` | ``full``) and ``inline`` (``1`` | ``0``: run
statements on the event loop, or all on the store's thread; see
:mod:`rtalab.loadtests.dedup.sqlite`), Redis also ``prefix`` and ``timeout_s`` (a command
unanswered this long fails, cause ``timeout``; default 2).
A value in the URL wins over the keyword argument of the same name.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit, urlunsplit

from rtalab.loadtests.dedup.base import (
    DEFAULT_LEASE_S,
    Claim,
    DedupStore,
    StalePolicy,
    StoreStats,
    is_lost_outcome,
    lost_outcome,
)
from rtalab.loadtests.dedup.memory import MemoryStore
from rtalab.loadtests.dedup.sqlite import SqliteStore

__all__ = ["Claim", "DedupStore", "StoreStats", "is_lost_outcome", "lost_outcome",
           "open_store", "parse_store_url"]

_USAGE = "expected memory, sqlite:///PATH or redis://HOST:PORT[/DB]"
_COMMON_PARAMS = {"lease_s", "on_stale"}
_BACKEND_PARAMS = {"memory": set(), "sqlite": {"synchronous", "inline"},
                   "redis": {"prefix", "timeout_s"}}
_BOOLS = {"1": True, "true": True, "yes": True, "0": False, "false": False, "no": False}


def _bad(url: str, problem: str) -> ValueError:
    """A one-line error naming the URL and the problem."""
    return ValueError(f"bad dedup store URL {url!r}: {problem} ({_USAGE})")


def parse_store_url(url: str) -> tuple[str, str, dict[str, Any]]:
    """Split a store URL into (backend, target, options); raise ValueError if malformed."""
    if not isinstance(url, str) or not url.strip():
        raise _bad(str(url), "empty")
    url = url.strip()
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if (not scheme and parts.path == "memory") or scheme == "memory":
        backend, target = "memory", ""
        if scheme and (parts.netloc or parts.path):
            raise _bad(url, "the memory store takes no location")
    elif scheme == "sqlite":
        backend = "sqlite"
        target = (parts.netloc + parts.path) if parts.netloc else parts.path
        if not target or target.endswith("/") or target == ":memory:":
            raise _bad(url, "missing SQLite file path")
        if parts.netloc == "" and url.startswith("sqlite://") and not url.startswith("sqlite:///"):
            raise _bad(url, "missing SQLite file path")
    elif scheme in ("redis", "rediss"):
        backend = "redis"
        try:
            port = parts.port
        except ValueError:
            raise _bad(url, "port must be a number in 1..65535") from None
        if not parts.hostname:
            raise _bad(url, "missing host")
        if port == 0:
            raise _bad(url, "port must be a number in 1..65535")
        db = parts.path.strip("/")
        if db and not db.isdigit():
            raise _bad(url, f"database must be a number, got {db!r}")
        target = urlunsplit((scheme, parts.netloc, f"/{db or 0}", "", ""))
    else:
        raise _bad(url, f"unknown scheme {parts.scheme or url!r}")
    options: dict[str, Any] = {}
    allowed = _COMMON_PARAMS | _BACKEND_PARAMS[backend]
    for k, v in parse_qsl(parts.query, keep_blank_values=True):
        if k not in allowed:
            raise _bad(url, f"unknown parameter {k!r} for {backend} (allowed: "
                            f"{', '.join(sorted(allowed))})")
        if k in ("lease_s", "timeout_s"):
            try:
                options[k] = float(v)
            except ValueError:
                raise _bad(url, f"{k} must be a number, got {v!r}") from None
            if not options[k] > 0:
                raise _bad(url, f"{k} must be > 0, got {v!r}")
        elif k == "on_stale" and v not in ("fail", "reclaim"):
            raise _bad(url, f"on_stale must be 'fail' or 'reclaim', got {v!r}")
        elif k == "synchronous" and v.lower() not in ("normal", "full"):
            raise _bad(url, f"synchronous must be 'normal' or 'full', got {v!r}")
        elif k == "inline":
            if v.lower() not in _BOOLS:
                raise _bad(url, f"inline must be 0 or 1, got {v!r}")
            options[k] = _BOOLS[v.lower()]
        else:
            options.setdefault(k, v.lower() if k == "synchronous" else v)
    return backend, target, options


def open_store(url: str, window_s: float, *, lease_s: float = DEFAULT_LEASE_S,
               on_stale: StalePolicy = "fail") -> DedupStore:
    """Build (not start) the store for ``url``; ``await store.start()`` before use."""
    backend, target, options = parse_store_url(url)
    options = {"lease_s": lease_s, "on_stale": on_stale, **options}
    if backend == "memory":
        return MemoryStore(window_s, **options)
    if backend == "sqlite":
        return SqliteStore(Path(target).expanduser().absolute(), window_s, **options)
    # lazy: +287 ms (redis, opentelemetry, cryptography) off importing rtalab.loadtests.dedup
    from rtalab.loadtests.dedup.redis import RedisStore

    return RedisStore(target, window_s, **options)
