"""uvicorn's logging for the project's servers (the Reasoner, the chaos proxy).

uvicorn's default config, one noise filter on ``uvicorn.error`` (each server's own false
alarms) and the ``rtalab`` logger, plus any other, on the default handler.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Mapping
from typing import Any

import uvicorn


def uvicorn_log_config(level: str, noise: type[logging.Filter],
                       levels: Mapping[str, str] | None = None) -> dict[str, Any]:
    """uvicorn's logging config with ``noise`` filtering ``uvicorn.error``, the ``rtalab``
    logger at ``level`` and each logger of ``levels`` (name -> level) on the default handler."""
    cfg = copy.deepcopy(uvicorn.config.LOGGING_CONFIG)
    cfg.setdefault("filters", {})["noise"] = {"()": noise}
    cfg["loggers"]["uvicorn.error"] = {**cfg["loggers"].get("uvicorn.error", {}),
                                       "filters": ["noise"]}
    for name, lvl in {"rtalab": level.upper(), **(levels or {})}.items():
        cfg["loggers"][name] = {"handlers": ["default"], "level": lvl, "propagate": False}
    return cfg
