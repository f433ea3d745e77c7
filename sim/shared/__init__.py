"""What simulator runs and load runs share: the record schema and everything downstream of it.

A load run (``loadtests``) turns its ledgers into the same tables as a simulator run and
then uses these modules unchanged: :mod:`.schema` (the tables' columns), :mod:`.summary`
and :mod:`.stats` (metrics with CIs), :mod:`.results` and :mod:`.manage` (run folders),
:mod:`.compare`, :mod:`.cards`, :mod:`.fmt` (reading and rendering; the HTML report, an
application over every folder kind, is :mod:`rtalab.sim.report`, above the answers),
:mod:`.junit`, :mod:`.progress`, :mod:`.argtypes` (CLI glue), :mod:`.dedup_rule` (the
request-dedup rule both sides apply) and :mod:`.agreement` (simulation vs load run).

Nothing in here imports anything above it: the simulator's model, runner, sweep engine,
answers, calibration, report or CLI.
"""
