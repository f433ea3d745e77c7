"""Observations from an OTLP JSON export (placeholder until the adapter lands)."""

from __future__ import annotations

from pathlib import Path

from sim.calibrate.observations import ObservationError, Observations


def from_otlp(path: str | Path, mapping: str | Path | None = None) -> Observations:
    """Not implemented yet."""
    raise ObservationError(f"{path}: otlp: not implemented yet")
