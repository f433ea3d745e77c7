"""The fast model beside the simulator: a scenario's Reasoner queue and retry orbit as a fluid
(mean-field ODE) model and as a continuous-time Markov chain (docs/contracts.md, "Fast model").

- :mod:`rtalab.sim.fastmodel.params` — :func:`from_scenario` → :class:`FastParams` (plain data);
  :func:`replica_params`: one replica's share of a ``[fleet]`` (or its pooled queue);
- :mod:`rtalab.sim.fastmodel.fluid` — :func:`trajectory`, :func:`fixed_points`, :func:`p_timeout`;
- :mod:`rtalab.sim.fastmodel.ctmc` — the chain over (requests in the Reasoner, callers in the
  orbit): stationary laws and expected hitting times.
"""
