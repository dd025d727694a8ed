"""Hyperparameter sweeps: grid x seeds as vmapped compiled programs (:func:`sweep`).

* :mod:`offrl.sweep.grid`     ``--grid`` parsing, traced vs fixed fields, programs
* :mod:`offrl.sweep.program`  one program: configurations x seeds in one ``vmap``
* :mod:`offrl.sweep.local`    :func:`sweep` over the programs on this machine
* :mod:`offrl.sweep.report`   scores, the best configuration, table, ``sweep.json``, heatmap
"""

from offrl.sweep.local import sweep
from offrl.sweep.report import SweepResult

__all__ = ["SweepResult", "sweep"]
