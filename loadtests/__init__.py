"""rtalab's load tests: the Live users, the reference Reasoner, the chaos proxy, the runners.

gRPC's C core logs a failed TLS handshake at INFO straight to stderr (grpcio >= 1.66 logs
through absl, which writes everything to stderr until absl is initialised) -- a second line
under the one-line certificate error rtalab prints.  Its verbosity is set to ERROR before any
``grpc`` import, unless the user set ``GRPC_VERBOSITY`` (``GRPC_VERBOSITY=INFO rtalab ...``
brings the C core's lines back for debugging).
"""

import os as _os

_os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
