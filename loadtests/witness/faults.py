"""Faults the witness injects into tool executions, and how one request draws its fate.

Per request one uniform draw picks, in this order of probability mass:

- ``error`` (``errorRate``): after the latency, answer 500 or 503 (``errorStatus``);
  no side effect;
- ``timeout`` (``timeoutP``): hang ``hangS`` (longer than any caller's timeout),
  then answer 504; no side effect;
- ``slow-success`` (``slowSuccessP``): the side effect completes and is recorded
  ``slowSuccessDelayS`` after arrival (set it above the Reasoner's upstream
  timeout), then the answer is 200 — usually to a caller that already gave up;
- otherwise ``ok``: after the latency (``latencyS``, a :mod:`rtalab.sim.dist` spec) the
  side effect is recorded and the answer is 200.
"""

from __future__ import annotations

import json
import math
import tomllib
from dataclasses import asdict, dataclass, replace
from typing import Any, Literal

import numpy as np

from rtalab.sim.dist import Const, Dist, DistError, parse_dist

Fate = Literal["ok", "error", "timeout", "slow-success"]
ERROR_STATUSES = (500, 502, 503, 504)
NO_LATENCY: Dist = Const(0.0)


class FaultError(ValueError):
    """A fault setting is invalid; the message names the field."""


_JSON_NAMES = {"latency_s": "latencyS", "error_rate": "errorRate", "error_status": "errorStatus",
               "timeout_p": "timeoutP", "hang_s": "hangS", "slow_success_p": "slowSuccessP",
               "slow_success_delay_s": "slowSuccessDelayS"}
_FIELDS = {v: k for k, v in _JSON_NAMES.items()}


@dataclass(frozen=True)
class Faults:
    """The witness's fault settings (JSON names in ``POST /faults``: camelCase)."""

    latency_s: Dist = NO_LATENCY
    error_rate: float = 0.0
    error_status: tuple[int, ...] = (500, 503)
    timeout_p: float = 0.0
    hang_s: float = 30.0
    slow_success_p: float = 0.0
    slow_success_delay_s: float = 5.0

    def __post_init__(self) -> None:
        for name in ("error_rate", "timeout_p", "slow_success_p"):
            p = getattr(self, name)
            if not 0.0 <= p <= 1.0:
                raise FaultError(f"{_JSON_NAMES[name]}: must be a probability in [0, 1], "
                                 f"got {p!r}")
        total = self.error_rate + self.timeout_p + self.slow_success_p
        if total > 1.0 + 1e-12:
            raise FaultError(f"errorRate + timeoutP + slowSuccessP must be <= 1, got {total:g}")
        for name in ("hang_s", "slow_success_delay_s"):
            v = getattr(self, name)
            if not (math.isfinite(v) and v >= 0):
                raise FaultError(f"{_JSON_NAMES[name]}: must be a finite number >= 0, got {v!r}")
        if not self.error_status or any(s not in ERROR_STATUSES for s in self.error_status):
            raise FaultError(f"errorStatus: must be a non-empty list of {list(ERROR_STATUSES)}, "
                             f"got {list(self.error_status)!r}")

    def draw(self, rng: np.random.Generator) -> Fate:
        """The fate of one request."""
        u = float(rng.random())
        if u < self.error_rate:
            return "error"
        if u < self.error_rate + self.timeout_p:
            return "timeout"
        if u < self.error_rate + self.timeout_p + self.slow_success_p:
            return "slow-success"
        return "ok"

    def to_json(self) -> dict[str, Any]:
        """Plain JSON with camelCase names (the latency as its scenario-file spec)."""
        d = {_JSON_NAMES[k]: v for k, v in asdict(self).items()}
        d["latencyS"] = self.latency_s.to_toml()
        d["errorStatus"] = list(self.error_status)
        return d

    def updated(self, changes: Any) -> Faults:
        """A copy with the camelCase fields of a ``POST /faults`` body changed."""
        if not isinstance(changes, dict):
            raise FaultError("body must be a JSON object of fault fields")
        unknown = set(changes) - set(_FIELDS)
        if unknown:
            raise FaultError(f"unknown field(s) {sorted(unknown)}; known: {sorted(_FIELDS)}")
        kwargs: dict[str, Any] = {}
        for name, value in changes.items():
            if name == "latencyS":
                try:
                    kwargs["latency_s"] = parse_dist(value)
                except DistError as e:
                    raise FaultError(f"latencyS: {e}") from None
            elif name == "errorStatus":
                values = value if isinstance(value, list) else [value]
                if not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
                    raise FaultError(f"errorStatus: must be HTTP status numbers, got {value!r}")
                kwargs["error_status"] = tuple(values)
            else:
                if isinstance(value, bool) or not isinstance(value, int | float):
                    raise FaultError(f"{name}: must be a number, got {value!r}")
                kwargs[_FIELDS[name]] = float(value)
        return replace(self, **kwargs)


def parse_dist_text(text: str) -> Dist:
    """A latency spec from the command line: ``0.05``, JSON or a TOML inline table."""
    text = text.strip()
    try:
        spec: Any = json.loads(text)
    except json.JSONDecodeError:
        try:
            spec = tomllib.loads(f"v = {text}")["v"]
        except tomllib.TOMLDecodeError:
            raise FaultError(f"latency spec {text!r} is neither a number, JSON nor a TOML "
                             "inline table like {dist = \"exp\", mean = 0.05}") from None
    try:
        return parse_dist(spec)
    except DistError as e:
        raise FaultError(f"latency spec {text!r}: {e}") from None
