"""D4RL-style dataset tiers collected from a behaviour-policy zoo (Fu et al. 2020, "D4RL").

=============  =====================================================================
tier           behaviour
=============  =====================================================================
random         the randomly initialised SAC actor (snapshot at step 0)
expert         the snapshot with the highest mean stochastic return
medium         the snapshot whose mean stochastic return is closest to
               ``R_random + (R_expert - R_random) / 3`` (normalized score 33); see
               :data:`MEDIUM_RULE`
medium-replay  the training replay history from step 0 up to the medium snapshot
medium-expert  ``size // 2`` medium transitions followed by ``size - size // 2`` expert ones
=============  =====================================================================

Collection runs the *stochastic* policy (as D4RL did) in ``num_envs`` environments in lockstep,
each with a budget of ``size / num_envs`` steps. ``terminals`` are gymnasium's ``terminated``,
``timeouts`` its ``truncated`` and the cut at the end of each env's budget (the last, partial
episode ends with a timeout). ``infos`` holds ``action_log_probs`` (``log pi_b(a|s)``, the
density of the recorded env-unit action), ``action_mean`` and ``action_std`` (of the
pre-squash Gaussian ``u``, with ``a = low + (tanh(u) + 1) (high - low) / 2``).

Normalized-score references: D4RL's published ones for hopper / halfcheetah / walker2d
(so scores compare with the literature); the zoo's measured ones otherwise. Both are recorded.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from offrl.data.doctor.tier import TIERS
from offrl.errors import ConfigError

MEDIUM_RULE = ("medium = the snapshot (other than step 0 and the expert) whose mean stochastic evaluation return is "
               "closest to R_random + (R_expert - R_random) / 3, i.e. a normalized score of about 33 on the zoo's own references")


def dataset_name(env_id: str, tier: str) -> str:
    """``("Hopper-v5", "medium")`` -> ``"hopper-medium-v0"``."""
    from offrl.envs import env_family

    return f"{env_family(env_id)}-{tier}-v0"


def free_dataset_name(name: str) -> str:
    """``name``, or ``<name>-local-v0`` when a dataset bundled with offrl already uses ``name``
    (the registry never lets the cache shadow a bundled dataset)."""
    from offrl.data.registry import BUNDLED_DIR

    if (BUNDLED_DIR / f"{name}.hdf5").exists() or (BUNDLED_DIR / name).is_dir():
        return re.sub(r"-v(\d+)$", r"-local-v\1", name)
    return name


def select_snapshots(index: dict) -> dict:
    """Steps and returns of the random, medium and expert snapshots of a zoo index."""
    snaps = sorted(index["snapshots"], key=lambda s: s["step"])
    if len(snaps) < 2:
        raise ConfigError(f"the zoo has {len(snaps)} snapshot(s); train longer (offrl collect train-behavior) so there is more than the random one.")
    random_snap = snaps[0]
    expert = max(snaps[1:], key=lambda s: s["return_mean"])
    r_lo, r_hi = random_snap["return_mean"], expert["return_mean"]
    if r_hi <= r_lo:
        raise ConfigError(f"no snapshot of the zoo beats the random policy (best return {r_hi:.1f} vs random {r_lo:.1f}); train longer with offrl collect train-behavior --steps.")
    target = r_lo + (r_hi - r_lo) / 3.0
    candidates = [s for s in snaps[1:] if s["step"] != expert["step"]] or [expert]
    medium = min(candidates, key=lambda s: (abs(s["return_mean"] - target), s["step"]))
    return {"random": random_snap, "medium": medium, "expert": expert, "medium_target_return": target}


def collect_with_policy(env_id: str, policy, size: int, seed: int, num_envs: int = 8, progress=None) -> dict:
    """Run the stochastic ``policy`` (a :class:`offrl.collect.zoo.BehaviorPolicy` or
    ``DiscreteBehaviorPolicy``) for ``size`` steps in total over ``num_envs`` envs
    (:func:`offrl.rollout.collect_steps`); return D4RL-layout arrays. The policy acts through its
    ``reproducible_rollout_policy(seed)``, so the same zoo, seed and packages build the same
    arrays on any x86-64 host."""
    import jax

    from offrl.rollout import VectorEnv, collect_steps

    num_envs = max(1, min(num_envs, size))
    budgets = [size // num_envs + (1 if i < size % num_envs else 0) for i in range(num_envs)]
    env = VectorEnv(env_id, num_envs)
    try:
        return collect_steps(env, policy.reproducible_rollout_policy(seed), policy.params, budgets, seed,
                             jax.random.PRNGKey(seed), progress=progress)
    finally:
        env.close()


def _to_dataset(arrays: dict, metadata: dict, source: str):
    from offrl.data.dataset import Dataset

    infos = {k.split("/", 1)[1]: v for k, v in arrays.items() if k.startswith("infos/")}
    return Dataset(arrays["observations"], arrays["actions"], arrays["rewards"], arrays["terminals"],
                   arrays["timeouts"], arrays["next_observations"], infos, metadata, source)


def _subsample_episodes(arrays: dict, size: int, seed: int) -> dict:
    """Keep randomly chosen whole episodes (in their original order) totalling at most ``size`` rows."""
    n = len(arrays["rewards"])
    if n <= size:
        return arrays
    ends = np.flatnonzero(arrays["terminals"] | arrays["timeouts"]) + 1
    if len(ends) == 0 or ends[-1] != n:
        ends = np.append(ends, n)
    starts = np.concatenate([[0], ends[:-1]])
    order = np.random.default_rng(seed).permutation(len(starts))
    keep, total = [], 0
    for k in order:
        length = ends[k] - starts[k]
        if total + length <= size:
            keep.append(k)
            total += length
    idx = np.concatenate([np.arange(starts[k], ends[k]) for k in sorted(keep)]) if keep else np.arange(size)
    return {k: v[idx] for k, v in arrays.items()}


def build_tier_dataset(zoo, tier: str, size: int = 100_000, seed: int = 0, env_id: str | None = None,
                       num_envs: int = 8, command: str | None = None, progress: bool = False, name: str | None = None):
    """Collect the ``tier`` dataset from the zoo folder ``zoo``; returns an :class:`offrl.data.Dataset`.

    ``name`` (default ``<env family>-<tier>-v0``) is recorded as ``metadata['name']``.
    """
    from offrl import __version__
    from offrl.collect.train import write_references
    from offrl.progress import ProgressBar
    from offrl.collect.zoo import load_policy, load_zoo_index, read_replay
    from offrl.envs import D4RL_REFERENCE_RETURNS, env_family

    if tier not in TIERS:
        raise ConfigError(f"unknown tier '{tier}'; choose one of {', '.join(TIERS)}.")
    if size <= 0:
        raise ConfigError(f"--size must be a positive number of transitions, got {size}.")
    index = load_zoo_index(zoo)
    if env_id is not None and env_id != index["env_id"]:
        raise ConfigError(f"--env {env_id} does not match the zoo '{zoo}', which was trained on {index['env_id']}; pass --env {index['env_id']} or another --zoo.")
    env_id = index["env_id"]
    chosen = select_snapshots(index)
    refs = write_references(zoo)
    family = env_family(env_id)
    if family in D4RL_REFERENCE_RETURNS:
        ref_min, ref_max = D4RL_REFERENCE_RETURNS[family]
        ref_source = "D4RL published reference returns (d4rl/infos.py)"
    else:
        ref_min, ref_max = refs["random"], refs["expert"]
        ref_source = f"measured in the zoo {Path(zoo).name}: {refs['rule']}"

    bar = ProgressBar(progress, total=size, title=f"collect {dataset_name(env_id, tier)}")
    try:
        parts = []
        if tier == "medium-replay":
            stop = chosen["medium"]["step"]
            arrays = read_replay(zoo, stop=stop)
            arrays["_cut"] = np.zeros(len(arrays["rewards"]), bool)
            if len(arrays["rewards"]) and not (arrays["terminals"][-1] or arrays["timeouts"][-1]):
                arrays["_cut"][-1] = True
            arrays = _subsample_episodes(arrays, size, seed)
            parts.append(("replay", arrays, chosen["medium"]))
        else:
            plan = {"random": [("random", size)], "medium": [("medium", size)], "expert": [("expert", size)],
                    "medium-expert": [("medium", size // 2), ("expert", size - size // 2)]}[tier]
            for which, n in plan:
                policy = load_policy(zoo, chosen[which]["step"])
                arrays = collect_with_policy(env_id, policy, n, seed=seed * 7919 + len(parts), num_envs=num_envs,
                                             progress=bar)
                parts.append((which, arrays, chosen[which]))
    finally:
        bar.close()
    arrays = {k: np.concatenate([p[1][k] for p in parts]) for k in parts[0][1]}
    if not (arrays["terminals"][-1] or arrays["timeouts"][-1]):
        arrays["timeouts"][-1] = True
    cut = arrays.pop("_cut")

    policy_returns = {p[0]: p[2]["return_mean"] for p in parts}
    policies = [{"part": p[0], "snapshot_step": p[2]["step"], "return_mean": p[2]["return_mean"],
                 "deterministic_return_mean": p[2]["deterministic_return_mean"], "rows": int(len(p[1]["rewards"]))} for p in parts]
    name = name or dataset_name(env_id, tier)
    metadata = {
        "name": name, "env_id": env_id, "env_version": index.get("env_version"), "tier": tier,
        "algorithm": "SAC (tanh-Gaussian, stochastic actions during collection)",
        "policy_return": float(np.mean(list(policy_returns.values()))),
        "policies": policies, "seed": seed, "size": int(len(arrays["rewards"])), "requested_size": size,
        "num_envs": num_envs if tier != "medium-replay" else None,
        "offrl_version": __version__, "gymnasium_version": index.get("gymnasium_version"),
        "mujoco_version": index.get("mujoco_version"),
        "action_low": index["action_low"], "action_high": index["action_high"],
        "ref_min_score": float(ref_min), "ref_max_score": float(ref_max), "ref_source": ref_source,
        "measured_ref_min_score": refs["random"], "measured_ref_max_score": refs["expert"],
        "medium_rule": MEDIUM_RULE, "medium_target_return": chosen["medium_target_return"],
        "zoo_seed": index.get("seed"), "zoo_command": index.get("command"), "zoo_steps_done": index.get("steps_done"),
        "command": command,
        "action_log_probs": "log pi_b(a|s) of the recorded env-unit action: log N(u; mean, std) - sum log(1 - tanh(u)^2) - sum log((high - low) / 2)",
        "action_distribution": "a = low + (tanh(u) + 1) * (high - low) / 2, u ~ N(action_mean, action_std^2)",
    }
    if index.get("algorithm") == "DQN":
        from offrl.collect.discrete import discrete_tier_metadata

        metadata = discrete_tier_metadata(metadata, index)
    if tier == "medium-replay":
        metadata["replay_stop_step"] = chosen["medium"]["step"]
    ds = _to_dataset(arrays, metadata, source=f"<offrl collect {name}>")
    rets = ds.episode_returns()
    complete = ~cut[ds.episode_bounds()[1] - 1]
    ds = ds.replace(metadata={**metadata, "num_episodes": int(ds.num_episodes),
                              "num_complete_episodes": int(complete.sum()),
                              "dataset_return_mean": float(rets[complete].mean()) if complete.any() else None,
                              "dataset_return_note": "mean undiscounted return of the complete episodes (episodes cut by the size budget excluded)"})
    return ds


def save_tier_dataset(ds, out=None, name: str | None = None, overwrite: bool = True, compress: bool = False) -> dict:
    """Write ``ds`` to ``out`` (format from the suffix; ``compress``: gzip for HDF5 / NPZ) and/or
    register it by ``name`` in the cache."""
    import offrl.data as data

    where = {}
    if out:
        where["file"] = str(data.save(ds, out, overwrite=overwrite, **({"compress": True} if compress else {})))
    if name:
        where["registered"] = f"{name} -> {data.register(ds, name, overwrite=overwrite)}"
    return where
