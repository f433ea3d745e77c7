"""The SimPy model of Live layers and a Reasoner under network faults.

One module per concern: :mod:`~sim.model.rand` (random streams),
:mod:`~sim.model.clock` (scheduling), :mod:`~sim.model.network` (fault model),
:mod:`~sim.model.messages` (the request and its response), :mod:`~sim.model.dedup`
(the Reasoner's dedup store), :mod:`~sim.model.reasoner` (the A2A server),
:mod:`~sim.model.witness` (side-effect ledger), :mod:`~sim.model.live` (calls,
turns, attempts under the retry policy of :mod:`sim.policy`),
:mod:`~sim.model.workload` (call arrivals), :mod:`~sim.model.recorder` (record
tables) and :mod:`~sim.model.world` (wiring and the run).  Use it through
:mod:`sim.runner`.

The package itself imports nothing: the Locust Live users take their samplers from
:mod:`sim.model.rand`, and importing the package must not pull the simulator (and pandas)
into every Locust process.
"""
