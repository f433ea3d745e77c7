"""The SimPy model of Live layers and a Reasoner under network faults.

One module per concern: :mod:`~rtalab.sim.model.rand` (random streams),
:mod:`~rtalab.sim.model.clock` (scheduling), :mod:`~rtalab.sim.model.network` (fault model),
:mod:`~rtalab.sim.model.messages` (the request and its response), :mod:`~rtalab.sim.model.dedup`
(the Reasoner's dedup store), :mod:`~rtalab.sim.model.reasoner` (the A2A server),
:mod:`~rtalab.sim.model.witness` (side-effect ledger), :mod:`~rtalab.sim.model.live` (calls,
turns, attempts under the retry policy of :mod:`rtalab.sim.policy`),
:mod:`~rtalab.sim.model.workload` (call arrivals), :mod:`~rtalab.sim.model.recorder` (record
tables) and :mod:`~rtalab.sim.model.world` (wiring and the run).  Use it through
:mod:`rtalab.sim.runner`.

The package itself imports nothing: the Locust Live users take their samplers from
:mod:`rtalab.sim.model.rand`, and importing the package must not pull the simulator (and pandas)
into every Locust process.
"""
