"""``rtalab load run``: a load run end to end (servers, Locust, ledgers, tables, verdict).

* :mod:`~rtalab.loadtests.loadrun.tables` — ledgers to the simulator's schema tables and summary;
* :mod:`~rtalab.loadtests.loadrun.orchestrate` — start, run, gather, check, write, stop;
* :mod:`~rtalab.loadtests.loadrun.cli` — the ``load`` command (``rtalab.commands`` entry point).
"""
