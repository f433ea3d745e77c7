"""Write tests/durations.json: seconds per test file, from a JUnit XML of a full run.

    .venv/bin/python -m pytest -n 4 --dist loadfile tests --junitxml=/tmp/full.xml
    .venv/bin/python tests/oneoff/record_durations.py /tmp/full.xml

tests/conftest.py hands the files to the xdist workers longest first (LPT: the longest
processing time first, so no long file starts last and leaves one worker running alone); a
file the table does not know counts as 0 s (it runs after the known ones).  Re-record when
a file's cost changes by much; the order only moves the suite's wall time, never a result.
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "durations.json"


def main(argv: list[str]) -> int:
    seconds: Counter[str] = Counter()
    for case in ET.parse(argv[0]).iter("testcase"):
        path = case.get("classname", "").replace(".", "/") + ".py"
        seconds[path] += float(case.get("time") or 0.0)
    OUT.write_text(json.dumps({p: round(s, 1) for p, s in sorted(seconds.items())},
                              indent=0) + "\n")
    print(f"{OUT}: {len(seconds)} files, {sum(seconds.values()):.0f} s of tests")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
