"""The Live layer as Locust users: whole calls over HTTP/SSE or WebSocket, with ledgers.

Modules (one concept each):

* :mod:`~rtalab.loadtests.live.config`   — the run settings every Locust process reads;
* :mod:`~rtalab.loadtests.live.wire`     — request building and event parsing (the wire contract);
* :mod:`~rtalab.loadtests.live.playback` — the reorder buffer (sequenceId order, first playable
  chunk);
* :mod:`~rtalab.loadtests.live.call`     — one call: turns, attempts, retries by
  ``rtalab.sim.policy``, faults;
* :mod:`~rtalab.loadtests.live.sse` / :mod:`~rtalab.loadtests.live.ws` — the two bindings (gevent);
* :mod:`~rtalab.loadtests.live.ledger`   — ledger rows, shipped from every process to the master;
* :mod:`~rtalab.loadtests.live.locustfile` — the Locust user class and the run conductor.

See docs/load.md.
"""
