"""The Live layer as Locust users: whole calls over HTTP/SSE or WebSocket, with ledgers.

Modules (one concept each):

* :mod:`~loadtests.live.config`   — the run settings every Locust process reads;
* :mod:`~loadtests.live.wire`     — request building and event parsing (the wire contract);
* :mod:`~loadtests.live.playback` — the reorder buffer (sequenceId order, first playable chunk);
* :mod:`~loadtests.live.call`     — one call: turns, attempts, retries by ``sim.policy``, faults;
* :mod:`~loadtests.live.sse` / :mod:`~loadtests.live.ws` — the two bindings (gevent);
* :mod:`~loadtests.live.ledger`   — ledger rows, shipped from every process to the master;
* :mod:`~loadtests.live.locustfile` — the Locust user class and the run conductor.

See docs/load.md.
"""
