"""``rtalab report``: one self-contained HTML report of any folder rtalab writes.

It stands above the answers and the sweep engine (it reads the folders of every kind they
write): :mod:`.render` (the entry point, :func:`~rtalab.sim.report.render.render_report`),
:mod:`.runs` (a simulated run, a load run, a fleet, the comparison of runs), :mod:`.sweeps`
(a sweep and the answers capacity, tune and storm) and :mod:`.pieces` (tables, figures,
files read).  Nothing below it imports it.
"""
