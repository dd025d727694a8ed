"""Offline RL algorithms, one file each; the registry of their names.

The contract a module meets (required names, its declared ``SPEC``, every optional hook and
capability) is written once in :mod:`offrl.algos.contract`. The registry maps a name
(``offrl train --algo NAME``) to the module's import path and a one-line summary, and imports a
module only when it is asked for, so ``import offrl.algos`` (and ``offrl --help``) does not
import JAX::

    get_algorithm("iql")             # the module offrl.algos.iql (imported now)
    algorithm_spec("iql").finetunable
    algorithm_names(finetunable=True)
    register("linear_bc", "my_package.linear_bc", "behaviour cloning with a linear policy")

``ALGORITHMS`` is a read-only mapping name -> module that imports on lookup.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from types import ModuleType
from typing import Iterator

from offrl.errors import ConfigError

#: name -> (module path, one-line summary), in the order of ``offrl train --help``.
_REGISTRY: dict[str, tuple[str, str]] = {
    "bc": ("offrl.algos.bc", "behaviour cloning (MSE or Gaussian likelihood)"),
    "td3": ("offrl.algos.td3", "TD3, the off-policy baseline without a behaviour constraint"),
    "td3_bc": ("offrl.algos.td3_bc", "TD3+BC: TD3 with a behaviour-cloning term (Fujimoto & Gu 2021)"),
    "iql": ("offrl.algos.iql", "Implicit Q-Learning: expectile value, advantage-weighted actor (Kostrikov et al. 2021)"),
    "cql": ("offrl.algos.cql", "Conservative Q-Learning (Kumar et al. 2020)"),
    "cal_ql": ("offrl.algos.cal_ql", "Cal-QL: CQL bounded below by the data's Monte-Carlo return (Nakamoto et al. 2023)"),
    "awac": ("offrl.algos.awac", "Advantage-Weighted Actor-Critic (Nair et al. 2020)"),
    "bcq": ("offrl.algos.bcq", "Batch-Constrained Q-learning with a VAE (Fujimoto et al. 2019)"),
    "dt": ("offrl.algos.dt", "Decision Transformer: return-conditioned sequence model (Chen et al. 2021)"),
    "tt": ("offrl.algos.tt", "Trajectory Transformer: GPT over tokenised trajectories, beam search (Janner et al. 2021)"),
    "diffuser": ("offrl.algos.diffuser", "Diffuser: planning by guided trajectory denoising (Janner et al. 2022)"),
    "discrete_bc": ("offrl.algos.discrete_bc", "behaviour cloning for discrete actions (cross-entropy)"),
    "dqn": ("offrl.algos.dqn", "DQN on a fixed dataset (Mnih et al. 2015)"),
    "double_dqn": ("offrl.algos.double_dqn", "double DQN on a fixed dataset (van Hasselt et al. 2016)"),
    "discrete_cql": ("offrl.algos.discrete_cql", "CQL's log-sum-exp penalty on a DQN (Kumar et al. 2020)"),
    "discrete_bcq": ("offrl.algos.discrete_bcq", "discrete BCQ: greedy over actions the behaviour model allows"),
    "discrete_iql": ("offrl.algos.discrete_iql", "IQL for discrete actions"),
    "rebrac": ("offrl.algos.rebrac", "ReBRAC: TD3+BC with a critic BC penalty, LayerNorm and large batches (Tarasov et al. 2023)"),
    "xql": ("offrl.algos.xql", "Extreme Q-Learning: IQL with a Gumbel-regression value loss (Garg et al. 2023)"),
    "sac_n": ("offrl.algos.sac_n", "SAC-N: SAC with N clipped critics in one vmapped ensemble (An et al. 2021)"),
    "edac": ("offrl.algos.edac", "EDAC: SAC-N plus the ensemble-gradient diversity term (An et al. 2021)"),
    "lb_sac": ("offrl.algos.lb_sac", "LB-SAC: SAC-N with a large batch and fewer critics (Nikulin et al. 2022)"),
    "crr": ("offrl.algos.crr", "Critic-Regularized Regression: advantage-filtered behaviour cloning (Wang et al. 2020)"),
    "td3_awr": ("offrl.algos.td3_awr", "TD3's critic with an advantage-weighted behaviour-cloning actor"),
    "brac": ("offrl.algos.brac", "BRAC: a KL penalty to a learned behaviour policy in the value or the policy (Wu et al. 2019)"),
    "bear": ("offrl.algos.bear", "BEAR: the policy kept within an MMD ball of the behaviour policy (Kumar et al. 2019)"),
    "plas": ("offrl.algos.plas", "PLAS: a policy in the latent space of a behaviour VAE (Zhou et al. 2020)"),
    "spot": ("offrl.algos.spot", "SPOT: TD3 with a VAE density support penalty (Wu et al. 2022)"),
    "mopo": ("offrl.algos.mopo", "MOPO: SAC on model rollouts penalised by the ensemble's uncertainty (Yu et al. 2020)"),
    "mobile": ("offrl.algos.mobile", "MOBILE: model rollouts penalised by Bellman inconsistency across members (Sun et al. 2023; experimental)"),
    "combo": ("offrl.algos.combo", "COMBO: CQL's regulariser on model samples (Yu et al. 2021)"),
    "idql": ("offrl.algos.idql", "IDQL: IQL's critic choosing among samples of a diffusion behaviour model (Hansen-Estruch et al. 2023)"),
    "fql": ("offrl.algos.fql", "flow Q-learning: a flow behaviour model distilled into a one-step policy that maximises Q (Park et al. 2025)"),
}
_MODULES: dict[str, ModuleType] = {}

#: the built-in names in the order of ``offrl train --help`` (:func:`algorithm_names` also lists registered ones).
ALGORITHM_NAMES = tuple(_REGISTRY)


def _key(name: str) -> str:
    return name.lower().replace("+", "_").replace("-", "_")


def register(name: str, module: str | ModuleType, summary: str = "") -> None:
    """Add a user algorithm under ``name`` (``offrl train --algo NAME``, :func:`offrl.train`).

    ``module`` is an import path (imported when first asked for) or an imported module; either
    way it must meet :mod:`offrl.algos.contract` (checked by :func:`offrl.algos.contract.check_spec`
    when it is loaded). Registration lasts for the process: register again before
    :func:`offrl.engine.load_run` in a new one. A built-in name cannot be replaced.
    """
    key = _key(name)
    if key in _REGISTRY and _REGISTRY[key][0].startswith("offrl.algos."):
        raise ConfigError(f"'{name}' is a built-in algorithm; register yours under another name.")
    if isinstance(module, ModuleType):
        from offrl.algos.contract import check_spec

        check_spec(module)
        _REGISTRY[key] = (module.__name__, summary)
        _MODULES[key] = module
    else:
        _REGISTRY[key] = (str(module), summary)
        _MODULES.pop(key, None)


def unregister(name: str) -> None:
    """Remove a user algorithm added with :func:`register` (built-ins stay)."""
    key = _key(name)
    if key in _REGISTRY and not _REGISTRY[key][0].startswith("offrl.algos."):
        del _REGISTRY[key]
        _MODULES.pop(key, None)


def get_algorithm(name: str) -> ModuleType:
    """The module for ``name``, imported now (``td3+bc`` and ``td3-bc`` also mean ``td3_bc``)."""
    key = _key(name)
    if key not in _REGISTRY:
        raise ConfigError(f"unknown algorithm '{name}'; choose one of: {', '.join(_REGISTRY)}.")
    if key not in _MODULES:
        from offrl.algos.contract import check_spec

        path = _REGISTRY[key][0]
        try:
            module = importlib.import_module(path)
        except ModuleNotFoundError as exc:
            if exc.name is None or not path.startswith(exc.name):
                raise
            raise ConfigError(f"algorithm '{name}' is registered as module '{path}', which cannot be imported "
                              f"({exc.name} not found); fix the path given to offrl.algos.register.") from None
        check_spec(module)
        _MODULES[key] = module
    return _MODULES[key]


def algorithm_spec(algorithm):
    """The declared :class:`offrl.algos.contract.AlgorithmSpec` of ``algorithm`` (a name or module)."""
    from offrl.algos.contract import algorithm_spec as declared

    return declared(get_algorithm(algorithm) if isinstance(algorithm, str) else algorithm)


def algorithm_names(*, finetunable: bool | None = None, action_space: str | None = None,
                    return_conditioned: bool | None = None, exportable: bool | None = None) -> tuple[str, ...]:
    """Registered names (built-ins first), optionally only those whose spec has the given
    ``finetunable``, ``action_space``, ``return_conditioned`` or ``exportable``; filtering
    imports the modules."""
    wanted = {k: v for k, v in (("finetunable", finetunable), ("action_space", action_space),
                                ("return_conditioned", return_conditioned), ("exportable", exportable)) if v is not None}
    if not wanted:
        return tuple(_REGISTRY)
    return tuple(n for n in _REGISTRY if all(getattr(algorithm_spec(n), k) == v for k, v in wanted.items()))


def algorithm_summaries() -> dict[str, str]:
    """``{name: one-line summary}`` of every registered algorithm, without importing any (help text)."""
    return {name: summary for name, (_, summary) in _REGISTRY.items()}


class _Algorithms(Mapping):
    """name -> module, importing a module when it is looked up."""

    def __getitem__(self, name: str) -> ModuleType:
        if _key(name) not in _REGISTRY:
            raise KeyError(name)
        return get_algorithm(name)

    def __iter__(self) -> Iterator[str]:
        return iter(tuple(_REGISTRY))

    def __len__(self) -> int:
        return len(_REGISTRY)

    def __repr__(self) -> str:
        return f"ALGORITHMS({', '.join(_REGISTRY)})"


ALGORITHMS: Mapping[str, ModuleType] = _Algorithms()

__all__ = ["ALGORITHMS", "ALGORITHM_NAMES", "algorithm_names", "algorithm_spec", "algorithm_summaries", "get_algorithm",
           "register", "unregister"]
