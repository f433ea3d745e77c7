"""Shared by every load-side package, and importing none of them: the process helpers that
start and stop servers (:mod:`.procs`), the servers' uvicorn logging (:mod:`.logs`), the TLS
settings (:mod:`.tls`) and throwaway certificates (:mod:`.certs`).  The wire client of the
tests and the fuzzer stands above the Reasoner and the Live users:
:mod:`rtalab.loadtests.wireclient`.
"""
