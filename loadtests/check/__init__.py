"""The Jepsen-style delivery checker of load runs: ``check_run(run_dir) -> Verdict``.

See docs/check.md for every rule, its errors.md section and its definition.
"""

from rtalab.loadtests.check.ledger import LedgerError
from rtalab.loadtests.check.run import check_run, evaluate
from rtalab.loadtests.check.verdict import RuleResult, Verdict

__all__ = ["LedgerError", "RuleResult", "Verdict", "check_run", "evaluate"]
