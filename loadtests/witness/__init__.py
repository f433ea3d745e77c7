"""The side-effect witness service: the Reasoner's tool upstream with a durable SQLite ledger.

See :mod:`loadtests.witness.app` for the HTTP API and the recording rule,
:mod:`loadtests.witness.faults` for fault injection, and
:mod:`loadtests.witness.cli` for ``rtalab serve witness``.
"""
