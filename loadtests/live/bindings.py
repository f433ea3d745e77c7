"""The registry of the Live users' bindings: a name -> channel factory map.

A binding is one module of :mod:`rtalab.loadtests.live` that defines
``open_channel(ctx: ChannelContext) -> Channel`` (the :class:`rtalab.loadtests.live.call.Channel`
interface :class:`rtalab.loadtests.live.call.Call` drives).  :data:`REGISTRY` names each
one with the third-party modules it needs: ``--binding all`` means every binding
whose module and requirements are installed here (:func:`available`).  A new
binding plugs in as one module plus one :class:`Binding` row below.

``--binding`` takes one name, a comma list (``sse,rest``), ``all``, or
``both`` (= ``sse,ws``, kept for compatibility); :func:`parse_bindings` turns it
into the canonical tuple (registry order, no repeats) that the run's settings
carry, and calls alternate over it (call ``n`` uses ``bindings[n % len]``).

Module imports are lazy (:meth:`Binding.factory`): asking whether a binding is
available never imports it, so a binding whose import has side effects (gRPC's
gevent mode) is loaded only in the Locust processes that use it.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

from rtalab.sim.vocab import BindingName as B

COMPAT = {"both": ("sse", "ws")}  # names kept for earlier command lines
ALL = "all"


@dataclass(frozen=True)
class ChannelContext:
    """What a channel factory gets for one call: the Locust user's HTTP session and base URL
    (``client``, ``host``), the run's :class:`rtalab.loadtests.live.config.LoadSettings`, this
    call's bearer token, Locust's ``events`` (for stats rows) and the client TLS settings
    (:class:`rtalab.loadtests.common.tls.ClientTls`)."""

    client: Any
    host: str
    settings: Any
    token: str | None
    events: Any
    tls: Any

    @property
    def ext_uri(self) -> str:
        """The profile extension's URI."""
        return str(self.settings.live.ext_uri)


ChannelFactory = Callable[[ChannelContext], Any]


@dataclass(frozen=True)
class Binding:
    """One binding of the registry."""

    name: str  # the --binding name and the ledgers' ``binding`` value
    module: str  # defines open_channel(ctx) -> Channel
    title: str  # for help texts and tables
    requires: tuple[str, ...] = ()  # top-level modules it needs (checked without importing)

    def missing(self) -> tuple[str, ...]:
        """The modules it needs that are not installed (nothing is imported)."""
        out = []
        for m in (*self.requires, self.module):
            try:
                found = importlib.util.find_spec(m) is not None
            except (ImportError, ValueError):
                found = False
            if not found:
                out.append(m)
        return tuple(out)

    def available(self) -> bool:
        """True if its module and requirements are installed."""
        return not self.missing()

    def factory(self) -> ChannelFactory:
        """Its ``open_channel`` (imports the module)."""
        # lazy: by name: a run loads only its binding's channel (grpc_channel: +91 ms, grpc)
        return cast("ChannelFactory", importlib.import_module(self.module).open_channel)


REGISTRY: dict[str, Binding] = {b.name: b for b in (
    Binding(B.SSE, "rtalab.loadtests.live.sse", "JSON-RPC over HTTP with SSE"),
    Binding(B.REST, "rtalab.loadtests.live.rest", "HTTP+JSON (REST) with SSE"),
    Binding(B.GRPC, "rtalab.loadtests.live.grpc_channel", "gRPC", requires=("grpc",)),
    Binding(B.WS, "rtalab.loadtests.live.ws", "JSON-RPC over WebSocket", requires=("websockets",)),
)}


def available() -> tuple[str, ...]:
    """Every registered binding usable on this install, in registry order."""
    return tuple(name for name, b in REGISTRY.items() if b.available())


def parse_bindings(text: str) -> tuple[str, ...]:
    """``sse``, ``rest,ws``, ``all``, ``both`` ... -> the canonical tuple (registry order, no
    repeats); raises ValueError naming what is wrong."""
    names: list[str] = []
    items = [t.strip() for t in str(text).split(",")]
    if not text or not all(items):
        raise ValueError(f"expected a binding name or a comma list, got {text!r}")
    for item in items:
        if item == ALL:
            names += available()
        elif item in COMPAT:
            names += COMPAT[item]
        elif item in REGISTRY:
            missing = REGISTRY[item].missing()
            if missing:
                raise ValueError(f"binding {item!r} is not available on this install "
                                 f"(missing: {', '.join(missing)})")
            names.append(item)
        else:
            raise ValueError(f"unknown binding {item!r}: expected one of "
                             f"{', '.join([*REGISTRY, ALL, *COMPAT])}")
    return tuple(n for n in REGISTRY if n in names)


def binding_list(text: str) -> tuple[str, ...]:
    """The tuple a settings value (``sse,ws``) names, without checking availability."""
    return tuple(t for t in str(text).split(",") if t)


def help_text() -> str:
    """The --binding help: the names and what each is."""
    return ("the Live users' binding(s): " + ", ".join(
        f"{b.name} ({b.title})" for b in REGISTRY.values())
        + "; a comma list, or 'all' (every binding available on this install); calls "
          "alternate over the set ('both' = sse,ws)")


def open_channel(name: str, ctx: ChannelContext) -> Any:
    """A new channel of binding ``name`` for one call."""
    fac = _FACTORIES.get(name)
    if fac is None:
        fac = _FACTORIES[name] = REGISTRY[name].factory()
    return fac(ctx)


_FACTORIES: dict[str, ChannelFactory] = {}
