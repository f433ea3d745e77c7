"""Outage kinds in the simulator (issue 28, point 2): what an attempt at an outage costs.

blackhole: an attempt sent inside the window hangs until its turn-response timer;
reset / reasoner-down: it fails at once (``response-lost``), and every attempt open when the
window starts is cut then; loss: each message is lost with the outage's probability.  The
chaos proxy realises the same (tests/twin/test_outage_kinds.py).  Planted bugs these fail
on: a refusing window treated as a blackhole, open attempts not cut at its start, a loss
window losing every message."""

from __future__ import annotations

import numpy as np
import pytest

from rtalab.sim.config import ConfigError
from rtalab.sim.runner import run_once
from rtalab.sim.scenario import load_scenario
from rtalab.sim.shared import schema as S

START, LENGTH = 20.0, 6.0


def _attempts(kind: str, **extra: float):
    sc = load_scenario("baseline").with_overrides({
        "run.duration_s": 40.0, "run.warmup_s": 5.0, "run.drain_s": 20.0,
        "network.outages": [{"start_s": START, "duration_s": LENGTH, "kind": kind, **extra}]})
    a = run_once(sc, 3, 0).attempts
    return a, sc.live.timeouts.turn_response_s


def _in_window(a):
    send = a[S.SEND_S].to_numpy(dtype=float)
    return a[(send >= START) & (send < START + LENGTH)]


@pytest.mark.parametrize("kind", ["reset", "reasoner-down"])
def test_a_refusing_outage_fails_attempts_at_once_and_cuts_the_open_ones(kind: str) -> None:
    a, _ = _attempts(kind)
    inside = _in_window(a)
    assert len(inside) > 10
    assert set(inside[S.OUTCOME].astype(str)) == {"response-lost"}
    took = inside[S.END_S].to_numpy(dtype=float) - inside[S.SEND_S].to_numpy(dtype=float)
    assert np.all(took == 0.0)  # refused: noticed at once, no timer
    send, end = (a[c].to_numpy(dtype=float) for c in (S.SEND_S, S.END_S))
    cut = a[(send < START) & (end == START)]  # open at the window's start: cut then
    assert len(cut) >= 1 and set(cut[S.OUTCOME].astype(str)) == {"response-lost"}
    assert not ((send < START) & (end > START) & (a[S.OUTCOME].astype(str) == "completed")
                & (a[S.FIRST_RESPONSE_S].to_numpy(dtype=float) > START)).any()


def test_a_blackhole_outage_hangs_attempts_until_a_timer() -> None:
    a, t_resp = _attempts("blackhole")
    inside = _in_window(a)
    assert len(inside) > 5
    took = inside[S.END_S].to_numpy(dtype=float) - inside[S.SEND_S].to_numpy(dtype=float)
    assert np.all(took >= t_resp - 1e-9)  # nothing came back: the timer ended each
    assert set(inside[S.OUTCOME].astype(str)) <= {"timeout", "total-timeout"}


def test_a_loss_outage_loses_messages_with_its_probability() -> None:
    lost = []
    for p in (0.0001, 0.5, 1.0):
        inside = _in_window(_attempts("loss", loss=p)[0])
        lost.append(float((inside[S.OUTCOME].astype(str) != "completed").mean()))
    assert lost[0] < 0.1 < lost[1] < lost[2]  # ~0, about half (up or down), all
    assert lost[2] == 1.0


def test_kind_validation() -> None:
    with pytest.raises(ConfigError, match="both directions"):
        load_scenario("baseline", ["network.outages=[{start_s=1, duration_s=2, kind='reset', "
                                   "direction='uplink'}]"])
    with pytest.raises(ConfigError, match="kind"):
        load_scenario("baseline", ["network.outages=[{start_s=1, duration_s=2, kind='cut'}]"])


def test_sim_run_outage_options_append_an_outage(tmp_path, capsys) -> None:
    from rtalab.sim.cli import main

    rc = main(["sim", "run", "baseline", "--replications", "1", "--set", "run.duration_s=30",
               "--set", "run.warmup_s=5", "--outage-at", "12", "--outage-for", "4",
               "--outage-kind", "reset", "--out", str(tmp_path), "--quiet", "--no-plots"])
    assert rc == 0
    (run,) = tmp_path.iterdir()
    sc = load_scenario(run / "scenario.toml")
    (o,) = sc.network.outages
    assert (o.start_s, o.duration_s, o.kind, o.direction) == (12.0, 4.0, "reset", "both")
    capsys.readouterr()
    assert main(["sim", "run", "baseline", "--outage-at", "1", "--outage-loss", "0.2",
                 "--out", str(tmp_path)]) == 2
    assert "--outage-kind loss only" in capsys.readouterr().err
