"""The side-effect witness service: the Reasoner's tool upstream with a durable SQLite ledger.

See :mod:`rtalab.loadtests.witness.app` for the HTTP API and the recording rule,
:mod:`rtalab.loadtests.witness.faults` for fault injection, and
:mod:`rtalab.loadtests.witness.cli` for ``rtalab serve witness``.
"""
