"""The reference Reasoner: an A2A 1.0 server (a2a-sdk 1.3) implementing the Realtime Agent profile.

Start it with ``rtalab serve reasoner`` or ``python -m rtalab.loadtests.reasoner``; see
docs/reasoner.md for the wire decisions.  Importing this package turns the
SDK's OpenTelemetry wrappers off (they cost ~15 %) unless the environment
already says otherwise; that must happen before ``a2a`` is first imported.
"""

import os

os.environ.setdefault("OTEL_INSTRUMENTATION_A2A_SDK_ENABLED", "false")
