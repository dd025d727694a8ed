"""Off-policy evaluation: estimate a policy's value from logged data alone, and choose
policies (checkpoints, hyperparameters) without the environment.

* :mod:`offrl.ope.tabular`: finite MDPs with exact values, to validate estimators.
* :mod:`offrl.ope.estimators`: IS, PDIS, WIS, WPDIS, clipped IS, DR, WDR, DM with intervals.
"""
