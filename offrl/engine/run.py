"""Runs: the self-describing run folder and the seed-stacked agent it holds.

``config.json`` (algorithm, config, settings, :class:`DataInfo`), ``metrics.jsonl``/``.csv``,
``checkpoints/`` (msgpack agents with their data keys) and ``plots/``. :func:`load_run` rebuilds
a :class:`Run` from its folder; :func:`evaluate` rolls its policies out again.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from offrl.engine.chunks import create_agents
from offrl.engine.data import DataInfo
from offrl.engine.evaluation import Evaluator, summarise_evaluation
from offrl.errors import ConfigError, OffrlError
from offrl.run_folder import read_metrics


@dataclass
class Run:
    """A training run: its folder, config, metrics and the (seed-stacked) agent."""

    path: Path | None
    algo: str
    config: Any
    settings: dict
    info: DataInfo
    agent: Any
    metrics: list[dict] = field(default_factory=list)

    @property
    def module(self):
        from offrl.algos import get_algorithm

        return get_algorithm(self.algo)

    @property
    def step(self) -> int:
        if self.agent is None:
            return max((int(r["step"]) for r in self.metrics), default=0)
        return int(np.asarray(self.agent.step).reshape(-1)[0])

    def evaluations(self) -> list[dict]:
        return [r for r in self.metrics if "eval/return" in r]

    @property
    def final_scores(self) -> list[float]:
        """The last evaluation's normalized score per seed (raw return when no references)."""
        last: dict[int, float] = {}
        for row in self.evaluations():
            value = row["eval/normalized_score"]
            last[row["seed"]] = row["eval/return"] if value is None or not math.isfinite(value) else value
        return [last[s] for s in sorted(last)]

    @property
    def final_returns(self) -> list[float]:
        last = {row["seed"]: row["eval/return"] for row in self.evaluations()}
        return [last[s] for s in sorted(last)]

    def summary(self) -> dict[str, float]:
        """Mean and std over seeds of the last evaluation's score and return."""
        scores, returns = np.array(self.final_scores, float), np.array(self.final_returns, float)
        if not len(scores):
            return {}
        return {"score_mean": float(scores.mean()), "score_std": float(scores.std()),
                "return_mean": float(returns.mean()), "return_std": float(returns.std()), "seeds": len(scores)}

    def act(self, observations, seed: int = 0) -> np.ndarray:
        """Deterministic env-space actions for raw observations ``(B, obs_dim)`` (seed ``seed``)."""
        import jax

        agent = jax.tree_util.tree_map(lambda x: x[seed], self.agent)
        a = np.asarray(self.module.act(agent, self.info.normalize(np.atleast_2d(observations))))
        return self.info.to_env_action(a)

    def __repr__(self) -> str:
        return f"Run({str(self.path)!r}, algo={self.algo!r}, step={self.step}, seeds={self.settings.get('seeds')})"


def run_record(algo, config, settings, info) -> dict:
    from offrl import __version__
    from offrl.algos.common import config_to_dict

    return {"algo": algo, "config": config_to_dict(config), "settings": settings,
            "data": dataclasses.asdict(info), "offrl_version": __version__}


def references(env_id, metadata) -> list[float] | None:
    """``[R_random, R_expert]`` for the normalized score (dataset metadata first), or None."""
    from offrl.envs import reference_returns

    ref = reference_returns(env_id, dict(metadata or {})) if env_id else None
    return None if ref is None else [float(ref[0]), float(ref[1])]


def reference_metadata(settings: dict) -> dict:
    ref = settings.get("references")
    return {} if not ref else {"ref_min_score": ref[0], "ref_max_score": ref[1]}


def load_run(path: str | Path, with_agent: bool = True, step: int | None = None) -> Run:
    """A finished or interrupted run from its folder, with the agent at its latest checkpoint,
    or at checkpoint ``step`` (kept by ``train(..., keep_checkpoints=True)``)
    (``with_agent=False``: metrics and config only, no checkpoint restored)."""
    import jax

    from offrl.algos import get_algorithm
    from offrl.algos.common import config_from_dict
    from offrl.checkpoint import checkpoint_at, latest_checkpoint, load_checkpoint

    folder = Path(path)
    if not (folder / "config.json").exists():
        raise OffrlError(f"{folder} is not a run folder (no config.json); pass the --out folder of `offrl train`.")
    record = json.loads((folder / "config.json").read_text())
    module = get_algorithm(record["algo"])
    config = config_from_dict(module.Config, record["config"])
    info = DataInfo(**record["data"])
    settings = record["settings"]
    metrics = read_metrics(folder / "metrics.jsonl")
    if not with_agent:
        return Run(folder, record["algo"], config, settings, info, None, metrics)
    agents, data_keys = create_agents(module, config, info.obs_dim, info.action_dim, settings["seed"], settings["seeds"])
    if record.get("phase") == "online" and "offline_config" in record:
        # a fine-tuning run's optimisers carry the offline ones' state (offrl.engine.online.carry_over),
        # so its checkpoint has that structure, not a fresh online agent's
        from offrl.engine.carry import carry_over

        offline_config = config_from_dict(module.Config, record["offline_config"])
        trained, _ = create_agents(module, offline_config, info.obs_dim, info.action_dim, settings["seed"], settings["seeds"])
        warmup = int(settings.get("finetune_lr_warmup_steps", 0)) * int(settings.get("finetune_utd", 1))
        agents = carry_over(agents, trained, warmup)
    latest = latest_checkpoint(folder / "checkpoints")
    if latest is None:
        raise OffrlError(f"{folder} has no checkpoint yet (checkpoints/latest.json is missing); train it longer or --resume it.")
    chosen = latest["path"] if step is None else checkpoint_at(folder / "checkpoints", step)
    state = load_checkpoint(chosen, {"agent": agents, "data_keys": data_keys})
    agents = jax.tree_util.tree_map(jax.numpy.asarray, state["agent"])
    return Run(folder, record["algo"], config, settings, info, agents, metrics)


def evaluate(run: Run | str | Path, episodes: int = 10, env: str | None = None, eval_seed: int = 20_000,
             policy_options: dict | None = None) -> dict:
    """Roll each seed's deterministic policy for ``episodes`` episodes.

    Returns ``{"per_seed": [dict, ...], "return": (mean, std), "normalized_score": (mean, std)}``
    over seeds; the per-seed dicts carry ``eval/return``, ``eval/normalized_score``,
    ``eval/q_estimate``, ``eval/discounted_return`` and ``eval/q_ratio``. ``policy_options``
    go to the module's ``rollout_policy`` (e.g. DT's ``{"target_return": R}``).
    """
    from offrl.envs import check_env_id

    check_env_id(env)
    if not isinstance(run, Run):
        run = load_run(run)
    env_id = env or run.info.env_id
    if not env_id:
        raise ConfigError("this run has no environment id to evaluate in; pass --env (a Gymnasium id such as Hopper-v5).")
    from offrl.envs import check_data_fits_env

    check_data_fits_env(env_id, run.info.obs_dim, run.info.action_dim, run.info.num_actions,
                        source=f"the run {run.path}" if run.path else "the run")
    seeds = int(np.asarray(run.agent.step).shape[0])
    evaluator = Evaluator(run.module, run.agent, run.info, env_id, episodes, seeds,
                          getattr(run.config, "discount", 0.99), eval_seed=eval_seed,
                          metadata=reference_metadata(run.settings) if env_id == run.info.env_id else None,
                          policy_options=policy_options)
    try:
        per_seed = summarise_evaluation(evaluator(run.agent))
    finally:
        evaluator.close()
    ret = np.array([r["eval/return"] for r in per_seed])
    score = np.array([r["eval/normalized_score"] for r in per_seed])
    return {"per_seed": per_seed, "return": (float(ret.mean()), float(ret.std())),
            "normalized_score": (float(score.mean()), float(score.std())), "episodes": episodes, "env": env_id}


# ====================================================================== throughput
