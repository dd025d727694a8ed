"""Offline RL algorithms, one file each (see :mod:`offrl.algos.common` for the interface).

``ALGORITHMS`` maps a name (``offrl train --algo NAME``) to its module, imported lazily on
first access (``offrl --help`` lists the names without importing JAX).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from types import ModuleType

from offrl.errors import ConfigError

#: names in the order of ``offrl train --help``.
ALGORITHM_NAMES = ("bc", "td3", "td3_bc", "iql", "cql", "cal_ql", "awac", "bcq", "dt", "tt", "diffuser",
                   "discrete_bc", "dqn", "double_dqn", "discrete_cql", "discrete_bcq", "discrete_iql",
                   "mopo", "mobile", "combo")


class _Registry(Mapping):
    """Name -> module, imported on first access, so listing the names imports no algorithm (nor JAX)."""

    def __getitem__(self, name: str) -> ModuleType:
        if name not in ALGORITHM_NAMES:
            raise KeyError(name)
        return importlib.import_module(f"offrl.algos.{name}")

    def __contains__(self, name) -> bool:
        return name in ALGORITHM_NAMES

    def __iter__(self):
        return iter(ALGORITHM_NAMES)

    def __len__(self) -> int:
        return len(ALGORITHM_NAMES)


ALGORITHMS: Mapping[str, ModuleType] = _Registry()


def get_algorithm(name: str) -> ModuleType:
    """The module for ``name`` (``td3+bc`` and ``td3-bc`` also mean ``td3_bc``)."""
    key = name.lower().replace("+", "_").replace("-", "_")
    if key not in ALGORITHMS:
        raise ConfigError(f"unknown algorithm '{name}'; choose one of: {', '.join(ALGORITHMS)}.")
    return ALGORITHMS[key]


def algorithm_spec(algorithm):
    """The declared :class:`offrl.algos.contract.AlgorithmSpec` of ``algorithm`` (a name or module).

    TRANSITIONAL (house issue): modules that do not declare ``SPEC`` yet get one built from their
    old optional attributes; this shim goes once every module declares its spec.
    """
    from offrl.algos.contract import AlgorithmSpec, algorithm_spec as declared

    module = get_algorithm(algorithm) if isinstance(algorithm, str) else algorithm
    if hasattr(module, "SPEC"):
        return declared(module)
    name = module.__name__.split(".")[-1]
    hooks = {h: getattr(module, h, None) for h in ("extra_arrays", "sample", "config_for_dataset", "rollout_policy",
                                                   "explore", "export_arrays", "policy_layers")}
    return AlgorithmSpec(name=name, action_space=getattr(module, "ACTION_SPACE", "continuous"),
                         finetunable=name in ("cql", "cal_ql", "iql", "awac", "td3_bc", "td3"),
                         return_conditioned=name == "dt",
                         traced_fields=tuple(getattr(module.Config, "TRACEABLE", ())),
                         online_extras=getattr(module, "episode_extras", None),
                         online_extras_fill={"mc_returns": float("-inf")} if hasattr(module, "episode_extras") else {},
                         **hooks)


def algorithm_names(*, finetunable: bool | None = None, action_space: str | None = None) -> tuple[str, ...]:
    """Registered names, optionally only those whose spec is (not) ``finetunable`` or has ``action_space``."""
    names = ALGORITHM_NAMES
    if finetunable is not None:
        names = tuple(n for n in names if algorithm_spec(n).finetunable == finetunable)
    if action_space is not None:
        names = tuple(n for n in names if algorithm_spec(n).action_space == action_space)
    return names


__all__ = ["ALGORITHMS", "ALGORITHM_NAMES", "algorithm_names", "algorithm_spec", "get_algorithm"]
