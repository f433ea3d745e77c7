"""Shared by every load-side package: the raw wire client (:mod:`.wireclient`), the
process helpers that start and stop servers (:mod:`.procs`) and the servers' uvicorn
logging (:mod:`.logs`)."""
