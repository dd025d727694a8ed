"""Environments: construction, reference returns and the normalized score.

``normalized_score(env, R) = 100 * (R - R_random) / (R_expert - R_random)``.
D4RL's published references are kept for hopper / halfcheetah / walker2d (REFERENCES.md);
offrl measures its own for other environments when it builds a behaviour-policy zoo
(``offrl collect``), stored in ``$OFFRL_HOME/references.json`` and in each dataset's metadata.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from offrl.errors import ConfigError

#: D4RL reference returns (d4rl/infos.py), keyed by the env family.
D4RL_REFERENCE_RETURNS: dict[str, tuple[float, float]] = {
    "halfcheetah": (-280.178953, 12135.0),
    "hopper": (-20.272305, 3234.3),
    "walker2d": (1.629008, 4592.3),
}

#: offrl's own measured references for environments D4RL does not cover (filled by `offrl collect`).
OFFRL_REFERENCE_RETURNS: dict[str, tuple[float, float]] = {
    # the Pendulum zoo of offrl/datasets/build.sh: random = the randomly initialised
    # SAC actor's mean stochastic return, expert = the best snapshot's (20 evaluation episodes each).
    "Pendulum-v1": (-1117.097168121652, -120.65851440277515),
}


def offrl_home() -> Path:
    """The cache folder for datasets, zoos and references: ``$OFFRL_HOME`` or ``~/.cache/offrl``."""
    return Path(os.environ.get("OFFRL_HOME", Path.home() / ".cache" / "offrl")).expanduser()


def env_family(env_id: str) -> str:
    """``"Hopper-v5"`` / ``"hopper-medium-v2"`` -> ``"hopper"``."""
    name = env_id.split("/")[-1].lower()
    name = re.sub(r"-v\d+$", "", name)
    return name.split("-")[0]


def _cached_references() -> dict[str, tuple[float, float]]:
    path = offrl_home() / "references.json"
    if not path.exists():
        return {}
    try:
        raw = json.loads(path.read_text())
        return {k: (float(v[0]), float(v[1])) for k, v in raw.items()}
    except (ValueError, TypeError, IndexError, KeyError):
        return {}


def reference_returns(env_id: str, metadata: dict | None = None, d4rl: bool = True):
    """``(random, expert)`` returns for ``env_id``, or ``None`` when unknown.

    Order: a dataset's own ``metadata['ref_min_score'/'ref_max_score']``, D4RL's published
    values (for the three D4RL locomotion families, when ``d4rl``), offrl's built-in
    measurements, then the cache's ``references.json``.
    """
    metadata = metadata or {}
    if "ref_min_score" in metadata and "ref_max_score" in metadata:
        return float(metadata["ref_min_score"]), float(metadata["ref_max_score"])
    family = env_family(env_id)
    if d4rl and family in D4RL_REFERENCE_RETURNS:
        return D4RL_REFERENCE_RETURNS[family]
    for table in (OFFRL_REFERENCE_RETURNS, _cached_references()):
        for key in (env_id, family):
            if key in table:
                return table[key]
    return None


def normalized_score(env_id: str, returns, metadata: dict | None = None):
    """``100 * (R - R_random) / (R_expert - R_random)``; ``None`` when references are unknown."""
    ref = reference_returns(env_id, metadata)
    if ref is None:
        return None
    lo, hi = ref
    import numpy as np

    return 100.0 * (np.asarray(returns, dtype=np.float64) - lo) / (hi - lo)


#: the first word of the Gymnasium ids that importing ``ogbench`` registers.
OGBENCH_FAMILIES = ("cube", "scene", "puzzle", "pointmaze", "antmaze", "humanoidmaze", "antsoccer", "powderworld")


def is_ogbench_env_id(env_id: str | None) -> bool:
    """``cube-single-singletask-task1-v0``, ``visual-antmaze-large-navigate-v0``, ...: an OGBench id."""
    words = str(env_id or "").split("-")
    return (words[1] if words[0] == "visual" and len(words) > 2 else words[0]) in OGBENCH_FAMILIES


def register_optional_envs(env_id: str | None) -> None:
    """Register the Gymnasium ids of optional env packages that importing them does not register:
    MinAtar's ``MinAtar/<Game>-v0`` / ``-v1`` (``pip install 'offrl[minatar]'``) and OGBench's
    ``cube-single-singletask-task1-v0``, ``scene-v0``, ... (``pip install 'offrl[ogbench]'``)."""
    if is_ogbench_env_id(env_id):
        from gymnasium.envs.registration import registry

        if env_id not in registry:
            try:
                import ogbench  # noqa: F401  (registers its envs with Gymnasium on import)
            except ImportError:
                raise ConfigError(f"environment '{env_id}' needs the ogbench package; install it with pip install 'offrl[ogbench]'.") from None
        return
    if not str(env_id or "").startswith("MinAtar/"):
        return
    from gymnasium.envs.registration import registry

    if env_id in registry:
        return
    try:
        from minatar.gym import register_envs
    except ImportError:
        raise ConfigError(f"environment '{env_id}' needs the minatar package; install it with pip install 'offrl[minatar]'.") from None
    register_envs()


def make_env(env_id: str, **kwargs):
    """``gymnasium.make`` with one clear error for an unknown id or an action space that is
    neither ``Box`` nor ``Discrete``."""
    import gymnasium as gym

    register_optional_envs(env_id)
    try:
        env = gym.make(env_id, **kwargs)
    except gym.error.Error as exc:
        raise ConfigError(f"unknown environment '{env_id}' ({exc}); pass a Gymnasium id such as Pendulum-v1 or Hopper-v5.") from None
    if not isinstance(env.action_space, (gym.spaces.Box, gym.spaces.Discrete)):
        raise ConfigError(f"environment '{env_id}' has a {type(env.action_space).__name__} action space; offrl's algorithms need a continuous (Box) or a Discrete action space.")
    return env


def check_data_fits_env(env_id: str | None, obs_dim: int, action_dim: int, num_actions: int = 0,
                        source: str = "the dataset", flag: str = "--env") -> None:
    """Refuse, in one line and before anything runs, data whose observation or action shape is not
    ``env_id``'s (``num_actions > 0`` for discrete data). ``None`` passes (no env, no evaluation)."""
    if env_id is None:
        return
    import numpy as np

    env = make_env(env_id)
    try:
        env_obs = int(np.prod(env.observation_space.shape or (1,)))
        space = env.action_space
        env_discrete = hasattr(space, "n")
        env_actions = int(space.n) if env_discrete else int(np.prod(space.shape or (1,)))
    finally:
        env.close()
    data_actions = f"{num_actions} discrete actions" if num_actions else f"{action_dim}-dimensional continuous actions"
    env_text = f"{env_actions} discrete actions" if env_discrete else f"{env_actions}-dimensional continuous actions"
    if env_obs != int(obs_dim) or env_discrete != bool(num_actions) or env_actions != int(num_actions or action_dim):
        raise ConfigError(f"{source} has {int(obs_dim)}-dimensional observations and {data_actions}, but {flag} {env_id} has "
                          f"{env_obs}-dimensional observations and {env_text}; pass the env the data was collected in.")


def check_env_id(env_id: str | None, flag: str = "--env") -> None:
    """Raise :class:`ConfigError` when ``env_id`` is not in Gymnasium's registry (``None`` passes).

    Ids of the form ``module:Name-vN`` pass unchecked: Gymnasium imports ``module`` to register them.
    """
    if env_id is None or ":" in str(env_id):
        return
    import difflib

    register_optional_envs(env_id)
    from gymnasium.envs.registration import registry

    if env_id in registry:
        return
    close = difflib.get_close_matches(str(env_id), list(registry), n=3, cutoff=0.6)
    hint = f"did you mean {', '.join(close)}?" if close else "e.g. Pendulum-v1, Hopper-v5, HalfCheetah-v5 or Walker2d-v5."
    raise ConfigError(f"{flag} {env_id!r} is not a registered Gymnasium environment; {hint}")
