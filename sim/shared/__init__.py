"""What simulator runs and load runs share: the record schema and everything downstream of it.

A load run (``loadtests``) turns its ledgers into the same tables as a simulator run and
then uses these modules unchanged: :mod:`.schema` (the tables' columns), :mod:`.summary`
and :mod:`.stats` (metrics with CIs), :mod:`.results` and :mod:`.manage` (run folders),
:mod:`.compare`, :mod:`.report`, :mod:`.cards`, :mod:`.fmt` (reading and rendering),
:mod:`.junit`, :mod:`.progress`, :mod:`.argtypes` (CLI glue), :mod:`.dedup_rule` (the
request-dedup rule both sides apply) and :mod:`.agreement` (simulation vs load run).

Nothing in here imports the simulator's model, runner or CLI.
"""
