"""Shared by every load-side package: the raw wire client (:mod:`.wireclient`) and the
process helpers that start and stop servers (:mod:`.procs`)."""
