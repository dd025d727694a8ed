"""``offrl demo``: the field's failure modes, each a command that ends with a plot, a JSON of its
numbers and a one-line verdict (:mod:`offrl.demos.extrapolation`, :mod:`offrl.demos.compounding`,
:mod:`offrl.demos.causal_confusion`, :mod:`offrl.demos.dagger`)."""

DEMOS = ("extrapolation", "compounding", "causal-confusion", "dagger")
