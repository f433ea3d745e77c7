"""The error-code table of ``sim/policy/codes.py`` is the one of errors.md §2 (the copy in
docs/spec/): same codes, same retryability.  A new revision of the profile dropped into
docs/spec/ fails here until the policy follows it."""

from __future__ import annotations

import re
from pathlib import Path

from rtalab.sim.policy.codes import CODES, Retryability

SPEC = Path(__file__).resolve().parents[1] / "docs" / "spec" / "errors.md"

# errors.md §2 writes retryability in words; the policy's names for them.
WORDS = {"No": Retryability.NO, "Yes": Retryability.YES,
         "Yes (after backoff)": Retryability.AFTER_BACKOFF,
         "Yes (limited)": Retryability.LIMITED}


def spec_table(text: str) -> dict[str, Retryability]:
    """``code -> retryability`` from the rows of §2's table (``code meaning Retryable cause``)."""
    section = text.split("2. Stable error codes", 1)[1].split("3. Retryability", 1)[0]
    out = {}
    for line in section.splitlines():
        m = re.match(r"([a-z]+(?:-[a-z]+)*) .*? (Yes \((?:after backoff|limited)\)|Yes|No) ", line)
        if m:
            out[m.group(1)] = WORDS[m.group(2)]
    return out


def test_the_table_reader_reads_the_four_spellings() -> None:
    text = ("2. Stable error codes\nCode Meaning Retryable Typical cause\n"
            "a-b Thing went wrong No Cause\nc Other Yes (after backoff) Why\n"
            "d-e-f Third Yes Why\ng Fourth Yes (limited) Why\n3. Retryability\n")
    assert spec_table(text) == {"a-b": Retryability.NO, "c": Retryability.AFTER_BACKOFF,
                                "d-e-f": Retryability.YES, "g": Retryability.LIMITED}


def test_policy_codes_are_the_specs_codes() -> None:
    table = spec_table(SPEC.read_text(encoding="utf-8"))
    assert table == {"schema-validation": Retryability.NO,
                     "unsupported-directive": Retryability.NO,
                     "extension-inactive": Retryability.NO, "auth": Retryability.NO,
                     "rate-limited": Retryability.AFTER_BACKOFF,
                     "upstream-timeout": Retryability.YES,
                     "session-not-found": Retryability.NO,
                     "internal": Retryability.LIMITED}
    assert {c.value: i.retryability for c, i in CODES.items()} == table
