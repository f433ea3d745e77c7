"""The binding registry: --binding sets, 'all', 'both', and a binding that plugs in as a module."""

from __future__ import annotations

import sys
import types

import pytest

from rtalab.loadtests.live import bindings
from rtalab.loadtests.live.bindings import REGISTRY, Binding, ChannelContext, parse_bindings
from rtalab.loadtests.live.config import LoadSettings


def test_sets_are_canonical() -> None:
    assert parse_bindings("sse") == ("sse",)
    assert parse_bindings("ws,sse,sse") == ("sse", "ws")  # registry order, no repeats
    assert parse_bindings("both") == ("sse", "ws")  # kept for earlier command lines
    assert parse_bindings(" ws , sse ") == ("sse", "ws")


def test_all_is_every_available_binding() -> None:
    everything = parse_bindings("all")
    assert everything == bindings.available()
    assert {"sse", "ws"} <= set(everything)
    assert set(everything) <= set(REGISTRY)


@pytest.mark.parametrize("text", ["", "foo", "sse,", "sse,,ws", "SSE"])
def test_bad_names_are_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_bindings(text)


def test_unavailable_binding_names_what_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(REGISTRY, "nope", Binding("nope", "rtalab.loadtests.live.nope", "test",
                                                  requires=("no_such_module_rtalab",)))
    with pytest.raises(ValueError,
                       match=r"missing: no_such_module_rtalab, rtalab\.loadtests\.live\.nope"):
        parse_bindings("nope")
    assert "nope" not in parse_bindings("all")


def test_a_binding_plugs_in_as_one_module(monkeypatch: pytest.MonkeyPatch) -> None:
    mod = types.ModuleType("rtalab_test_binding")
    made: list[ChannelContext] = []
    mod.open_channel = lambda ctx: made.append(ctx) or ("channel", ctx.token)  # type: ignore
    mod.__spec__ = types.SimpleNamespace(name=mod.__name__)  # type: ignore[assignment]
    monkeypatch.setitem(sys.modules, mod.__name__, mod)
    monkeypatch.setitem(REGISTRY, "extra", Binding("extra", mod.__name__, "test"))
    monkeypatch.setattr(bindings, "_FACTORIES", {})
    assert "extra" in parse_bindings("all")
    settings = LoadSettings(run_dir=".", run_id="r", scenario_path="s.toml", binding="sse,extra")
    assert settings.bindings == ("sse", "extra")
    ctx = ChannelContext(None, "http://127.0.0.1:1", settings, "tok", None, None)
    assert bindings.open_channel("extra", ctx) == ("channel", "tok")
    assert made == [ctx] and ctx.ext_uri == settings.live.ext_uri


def test_settings_refuse_unknown_bindings() -> None:
    with pytest.raises(ValueError, match="binding must be"):
        LoadSettings(run_dir=".", run_id="r", scenario_path="s.toml", binding="sse,carrier")
