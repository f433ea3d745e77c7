"""rtalab: the simulator (``rtalab.sim``), the load side (``rtalab.loadtests``) and the
benchmarks (``rtalab.benchmarks``) of the Realtime Agent A2A Profile's error policy.

Installed (a wheel), the three are real subfolders of this package.  In a source checkout
they are the folders ``sim/``, ``loadtests/`` and ``benchmarks/`` beside this one
(``[tool.setuptools.package-dir]`` maps them at build time), so here the package's search
path is extended to the repository root: ``rtalab.sim`` is then found as ``<root>/sim``.
Only then: when a sibling ``sim/__init__.py`` exists and ``rtalab/sim`` does not, so an
installed rtalab never reaches into whatever folder sits beside it (docs/decisions.md).
"""

import os as _os

_here = _os.path.dirname(_os.path.abspath(__file__))
_root = _os.path.dirname(_here)
if (_os.path.isfile(_os.path.join(_root, "sim", "__init__.py"))
        and not _os.path.isdir(_os.path.join(_here, "sim"))):
    __path__.append(_root)
