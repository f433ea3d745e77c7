"""Validated, frozen configuration objects built from plain dicts (parsed TOML).

Config classes are frozen dataclasses whose fields carry their constraints in
``metadata`` (see :func:`num`).  :func:`build` turns a dict into an instance,
rejecting unknown keys, wrong types and out-of-range values with a
:class:`ConfigError` that names the dotted key path, e.g.
``network.uplink.loss: must be in [0, 1], got 1.5``.

Supported field types: ``bool``, ``int``, ``float``, ``str``, ``Literal[...]``,
:class:`~rtalab.sim.dist.Dist`, nested config dataclasses, ``tuple[<dataclass>, ...]``
(arrays of tables), ``tuple[float, ...]``, ``dict[str, float|int]`` and ``X | None`` (null
allowed).
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from typing import TYPE_CHECKING, Any, Literal, TypeVar, get_args, get_origin, get_type_hints

from rtalab.sim.dist import Dist, DistError, parse_dist

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

_T = TypeVar("_T", bound="DataclassInstance")


class ConfigError(ValueError):
    """A configuration value is invalid. ``key`` is the dotted path, ``problem`` the reason."""

    def __init__(self, key: str, problem: str):
        self.key = key
        self.problem = problem
        super().__init__(f"{key}: {problem}" if key else problem)


def num(default: Any, *, ge: float | None = None, gt: float | None = None,
        le: float | None = None, doc: str = "") -> Any:
    """A numeric dataclass field with bounds checked by :func:`build`."""
    return dataclasses.field(default=default, metadata={"ge": ge, "gt": gt, "le": le, "doc": doc})


def prob(default: float = 0.0, doc: str = "") -> Any:
    """A probability field, checked to lie in [0, 1]."""
    return num(default, ge=0.0, le=1.0, doc=doc)


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _check_bounds(value: float, meta: typing.Mapping[str, Any], path: str) -> None:
    ge, gt, le = meta.get("ge"), meta.get("gt"), meta.get("le")
    if ge is not None and le is not None and not (ge <= value <= le):
        raise ConfigError(path, f"must be in [{ge:g}, {le:g}], got {value!r}")
    if ge is not None and value < ge:
        raise ConfigError(path, f"must be >= {ge:g}, got {value!r}")
    if gt is not None and value <= gt:
        raise ConfigError(path, f"must be > {gt:g}, got {value!r}")
    if le is not None and value > le:
        raise ConfigError(path, f"must be <= {le:g}, got {value!r}")


def _convert(tp: Any, value: Any, path: str, meta: typing.Mapping[str, Any]) -> Any:
    origin = get_origin(tp)
    if origin in (typing.Union, types.UnionType) and type(None) in get_args(tp):
        if value is None:
            return None
        (inner,) = [a for a in get_args(tp) if a is not type(None)]
        return _convert(inner, value, path, meta)
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(path, f"must be true or false, got {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(path, f"must be an integer, got {value!r}")
        _check_bounds(value, meta, path)
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(path, f"must be a number, got {value!r}")
        value = float(value)
        if not math.isfinite(value):
            raise ConfigError(path, f"must be finite, got {value!r}")
        _check_bounds(value, meta, path)
        return value
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(path, f"must be a string, got {value!r}")
        return value
    if origin is Literal:
        allowed = get_args(tp)
        if value not in allowed:
            raise ConfigError(path, f"must be one of {list(allowed)}, got {value!r}")
        return value
    if isinstance(tp, type) and issubclass(tp, Dist):
        try:
            return parse_dist(value)
        except DistError as e:
            raise ConfigError(path, str(e)) from None
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return build(tp, value, path)
    if origin is tuple:
        args = get_args(tp)
        if not isinstance(value, list | tuple):
            raise ConfigError(path, f"must be an array, got {value!r}")
        item_tp = args[0]
        return tuple(_convert(item_tp, v, f"{path}[{i}]", meta) for i, v in enumerate(value))
    if origin is dict:
        _, val_tp = get_args(tp)
        if not isinstance(value, dict):
            raise ConfigError(path, f"must be a table, got {value!r}")
        allowed_keys = meta.get("keys")
        out = {}
        for k, v in value.items():
            if allowed_keys is not None and k not in allowed_keys:
                raise ConfigError(_join(path, k),
                                  f"unknown key; expected one of {sorted(allowed_keys)}")
            out[k] = _convert(val_tp, v, _join(path, k), meta)
        return types.MappingProxyType(out)
    raise TypeError(f"unsupported config type {tp!r} at {path}")  # programming error


def build(cls: type[_T], data: Any, path: str = "") -> _T:
    """Build the frozen dataclass ``cls`` from ``data``; raise :class:`ConfigError` on bad input."""
    if isinstance(data, cls):
        return data
    if not isinstance(data, dict):
        raise ConfigError(path, f"must be a table, got {data!r}")
    hints = get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = [k for k in data if k not in fields]
    if unknown:
        raise ConfigError(_join(path, unknown[0]),
                          f"unknown key; expected one of {sorted(fields)}")
    kwargs = {}
    for name, f in fields.items():
        if name in data:
            kwargs[name] = _convert(hints[name], data[name], _join(path, name), f.metadata)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ConfigError(_join(path, name), "missing required key")
    try:
        obj = cls(**kwargs)
    except ConfigError as e:
        if path and not e.key.startswith(path):
            raise ConfigError(_join(path, e.key), e.problem) from None
        raise
    return obj


def to_plain(obj: Any) -> Any:
    """Turn a config object back into TOML-ready plain data (the inverse of :func:`build`)."""
    if isinstance(obj, Dist):
        return obj.to_toml()
    if dataclasses.is_dataclass(obj):
        return {f.name: to_plain(getattr(obj, f.name)) for f in dataclasses.fields(obj) if f.init}
    if isinstance(obj, typing.Mapping):
        return {k: to_plain(v) for k, v in obj.items()}
    if isinstance(obj, tuple | list):
        return [to_plain(v) for v in obj]
    return obj
