"""Offline RL algorithms, one file each (see :mod:`offrl.algos.common` for the interface).

``ALGORITHMS`` maps a name (``offrl train --algo NAME``) to its module; a listed module that
does not exist yet is skipped.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from offrl.errors import ConfigError

#: names in the order of ``offrl train --help``.
ALGORITHM_NAMES = ("bc", "td3", "td3_bc", "iql", "cql", "cal_ql", "awac", "bcq", "dt", "tt", "diffuser",
                   "discrete_bc", "dqn", "double_dqn", "discrete_cql", "discrete_bcq", "discrete_iql")


def _load() -> dict[str, ModuleType]:
    found = {}
    for name in ALGORITHM_NAMES:
        module_name = f"offrl.algos.{name}"
        try:
            found[name] = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name != module_name:
                raise
    return found


ALGORITHMS: dict[str, ModuleType] = _load()


def get_algorithm(name: str) -> ModuleType:
    """The module for ``name`` (``td3+bc`` and ``td3-bc`` also mean ``td3_bc``)."""
    key = name.lower().replace("+", "_").replace("-", "_")
    if key not in ALGORITHMS:
        raise ConfigError(f"unknown algorithm '{name}'; choose one of: {', '.join(ALGORITHMS)}.")
    return ALGORITHMS[key]


__all__ = ["ALGORITHMS", "ALGORITHM_NAMES", "get_algorithm"]
