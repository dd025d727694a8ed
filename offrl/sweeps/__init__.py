"""Hyperparameter sweeps: grid x seeds as vmapped compiled programs (:func:`sweep`).

* :mod:`offrl.sweeps.grid`     ``--grid`` parsing, traced vs fixed fields, programs
* :mod:`offrl.sweeps.program`  one program: configurations x seeds in one ``vmap``
* :mod:`offrl.sweeps.local`    :func:`sweep` over the programs on this machine
* :mod:`offrl.sweeps.report`   scores, the best configuration, table, ``sweep.json``, heatmap
"""

from offrl.sweeps.local import sweep
from offrl.sweeps.report import SweepResult

__all__ = ["SweepResult", "sweep"]
