"""Result cards (sim/shared/cards.py): 80 columns, full names, units and CIs, nothing cut."""

from __future__ import annotations

import pandas as pd

from rtalab.sim.shared.cards import frame_cards, render


def test_cards_wrap_long_names_and_values_and_keep_everything() -> None:
    long_name = "live.retry.max_attempts_by_code.rate-limited.and.some.more.words (turns)"
    long_value = ", ".join(f"option_{i}" for i in range(12))
    text = render([("trial 3 — recommended", [("live.timeouts.turn_response_s (s)", "1.35"),
                                              (long_name, "4"), ("budget", long_value)])],
                  "a title " * 15)
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert "trial 3 — recommended" in lines
    flat = " ".join(text.split())
    assert long_name in flat and long_value in flat  # wrapped, never cut
    # a name longer than the label column gets its own line, the value under it
    i = next(k for k, line in enumerate(lines) if "rate-limited" in line)
    assert lines[i].strip().startswith("live.retry") and lines[i + 1].strip() in ("4",
                                                                                 "(turns)")
    assert "  live.timeouts.turn_response_s (s)  " in text


def test_frame_cards_fold_cis_units_and_drop_unset_parameters() -> None:
    df = pd.DataFrame([
        {"candidate": "trial 1", "param.live.backoff.base_s": 0.25,
         "caller_completion_s.p99": 2.5, "caller_completion_s.p99.ci_low": 2.0,
         "caller_completion_s.p99.ci_high": 3.0, "caller_completion_s.p99.change": -0.5,
         "caller_completion_s.p99.diff_ci_low": -0.75,
         "caller_completion_s.p99.diff_ci_high": -0.25, "caller_completion_s.p99.p": 0.01},
        {"candidate": "current", "param.live.backoff.base_s": None,
         "caller_completion_s.p99": 3.0, "caller_completion_s.p99.ci_low": 2.5,
         "caller_completion_s.p99.ci_high": 3.5, "caller_completion_s.p99.change": None,
         "caller_completion_s.p99.diff_ci_low": None,
         "caller_completion_s.p99.diff_ci_high": None, "caller_completion_s.p99.p": None},
    ])
    cards = frame_cards(df, lambda r: str(r["candidate"]),
                        lambda n: "s" if n.startswith(("caller_", "live.backoff")) else "",
                        skip=("candidate",))
    assert cards == [
        ("trial 1", [("live.backoff.base_s (s)", "0.25"),
                     ("caller_completion_s.p99 (s)", "2.5 [2, 3]"),
                     ("caller_completion_s.p99 change (s)", "-0.5 [-0.75, -0.25]"),
                     ("caller_completion_s.p99 p-value", "0.01")]),
        ("current", [("caller_completion_s.p99 (s)", "3 [2.5, 3.5]")]),
    ]
