"""The suite passes wherever it is started: as a background job (``make test &``, ``nohup``,
CI runners) SIGINT arrives ignored, so tests that interrupt a process set its disposition
themselves (:mod:`tests.signals`)."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path

from tests.signals import default_sigint, python_sigint

TESTS = Path(__file__).resolve().parent
PROBE = [sys.executable, "-c",
         "import signal; print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)"]


def _child_has_keyboard_interrupt(**popen: object) -> bool:
    """Start the probe from this process with SIGINT ignored, as a background job is."""
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        out = subprocess.run(PROBE, capture_output=True, text=True, check=True, timeout=60,
                             **popen).stdout  # type: ignore[call-overload]  # Popen kwargs
    finally:
        signal.signal(signal.SIGINT, old)
    return out.strip() == "True"


def test_a_child_of_a_background_job_gets_ctrl_c_back_with_default_sigint() -> None:
    assert not _child_has_keyboard_interrupt()  # what a background job hands down
    assert _child_has_keyboard_interrupt(preexec_fn=default_sigint)


def test_python_sigint_raises_keyboard_interrupt_even_when_sigint_was_ignored() -> None:
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with python_sigint():
            assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN  # restored
    finally:
        signal.signal(signal.SIGINT, old)


SENDS = re.compile(r"send_signal\(|os\.kill\(|os\.killpg\(")


def test_every_test_that_sends_sigint_sets_the_disposition() -> None:
    offenders = []
    for path in TESTS.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        if path.name in ("signals.py", Path(__file__).name) or not SENDS.search(text):
            continue
        if "SIGINT" in text and "default_sigint" not in text and "python_sigint" not in text:
            offenders.append(str(path.relative_to(TESTS)))
    assert not offenders, f"send SIGINT without tests.signals dispositions: {offenders}"
