"""The reference Reasoner: an A2A 1.0 server (a2a-sdk 1.3) implementing the Realtime Agent profile.

Start it with ``rtalab serve reasoner`` or ``python -m rtalab.loadtests.reasoner``; see
docs/reasoner.md for the wire decisions.  Importing this package turns the
SDK's OpenTelemetry wrappers off (they cost ~15 %) unless the environment
already says otherwise; that must happen before ``a2a`` is first imported.

It also keeps the SDK's SQL stores out (:data:`A2A_SQL_MODULES`): ``a2a.server.tasks`` and
``a2a.server.cluster`` import them, and SQLAlchemy with them, whenever SQLAlchemy is installed
(here it comes with optuna) -- 0.16 CPU-s at every Reasoner start, for stores the Reasoner
never uses (it keeps its own: :mod:`rtalab.loadtests.reasoner.taskstore`,
:mod:`rtalab.loadtests.dedup`).  Marked absent, they take the SDK's own fallback for an
install without SQLAlchemy (a placeholder class that raises if used); a module already
imported is left as it is.
"""

import os
import sys

os.environ.setdefault("OTEL_INSTRUMENTATION_A2A_SDK_ENABLED", "false")

#: the a2a-sdk modules that import SQLAlchemy (each imported by the SDK in a try/except
#: ImportError that falls back to a placeholder)
A2A_SQL_MODULES = ("a2a.server.tasks.database_task_store",
                   "a2a.server.tasks.database_push_notification_config_store",
                   "a2a.server.cluster.database_event_stream",
                   "a2a.server.cluster.database_task_store")
for _name in A2A_SQL_MODULES:
    sys.modules.setdefault(_name, None)  # type: ignore[arg-type]  # None = not importable (importlib)
