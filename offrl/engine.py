"""The training engine: data on the device, jitted ``lax.scan`` chunks, ``vmap`` over seeds.

One call of the jitted chunk function runs ``chunk_size`` updates for every seed::

    for step in range(chunk_size):                  # lax.scan
        key   = fold_in(data_key[seed], agent.step)   # sampling key derived from the state
        idx   = randint(key, (batch_size,), 0, N)     # minibatch drawn on the device
        agent, metrics = algo.update(agent, data[idx])

so Python runs once per chunk and the only host transfer is the chunk's stacked metrics.
Because the sampling key depends on ``agent.step`` only, a run resumed from a checkpoint
draws exactly the minibatches the uninterrupted run would have drawn, and on CPU reproduces
its parameters bit for bit.

Public API: :func:`train`, :func:`evaluate`, :func:`load_run`, :func:`measure_throughput`.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from offrl.errors import ConfigError, DivergenceError, OffrlError

BATCH_FIELDS = ("observations", "actions", "rewards", "next_observations", "masks")


# ====================================================================== data on the device
@dataclass(frozen=True)
class DataInfo:
    """How raw env quantities map to the agent's: everything needed to deploy the policy.

    ``obs_agent = (obs - obs_mean) / obs_std``; ``action_env = low + (a + 1) / 2 * (high - low)``;
    ``reward_agent = reward_scale * r + reward_bias``.
    """

    obs_dim: int
    action_dim: int
    obs_mean: list
    obs_std: list
    action_low: list
    action_high: list
    reward_scale: float = 1.0
    reward_bias: float = 0.0
    env_id: str | None = None

    def normalize(self, obs):
        return (np.asarray(obs, np.float32) - np.asarray(self.obs_mean, np.float32)) / np.asarray(self.obs_std, np.float32)

    def to_env_action(self, actions):
        low, high = np.asarray(self.action_low, np.float32), np.asarray(self.action_high, np.float32)
        return low + (np.clip(actions, -1.0, 1.0) + 1.0) * 0.5 * (high - low)

    def to_agent_action(self, actions):
        low, high = np.asarray(self.action_low, np.float32), np.asarray(self.action_high, np.float32)
        return np.clip(2.0 * (np.asarray(actions, np.float32) - low) / (high - low) - 1.0, -1.0, 1.0)


def _action_bounds(dataset, env_id):
    if env_id:
        from offrl.envs import make_env

        try:
            env = make_env(env_id)
            space = env.action_space
            env.close()
            return np.asarray(space.low, np.float32).reshape(-1), np.asarray(space.high, np.float32).reshape(-1)
        except OffrlError:
            pass
    acts = dataset.actions.reshape(len(dataset), -1)
    if acts.size and acts.min() >= -1.0 and acts.max() <= 1.0:
        return -np.ones(acts.shape[1], np.float32), np.ones(acts.shape[1], np.float32)
    low, high = acts.min(0), acts.max(0)
    return low.astype(np.float32), np.where(high > low, high, low + 1.0).astype(np.float32)


def _reward_scale(dataset, scaling) -> float:
    scaling = "none" if scaling is None else str(scaling).lower()
    if scaling in ("none", "", "1", "1.0"):
        return 1.0
    if scaling == "returns":
        returns = dataset.episode_returns()
        spread = float(returns.max() - returns.min()) if len(returns) else 0.0
        return 1000.0 / spread if spread > 0 else 1.0
    try:
        return float(scaling)
    except ValueError:
        raise ConfigError(f"config field 'reward_scaling' is {scaling!r}; use 'none', 'returns' or a number.") from None


def prepare_data(dataset, config, env_id: str | None = None):
    """``(device_arrays, DataInfo)``: actions into ``[-1, 1]``, optional obs / reward scaling."""
    import jax.numpy as jnp

    low, high = _action_bounds(dataset, env_id)
    n = len(dataset)
    obs_dim = int(np.prod(dataset.observations.shape[1:]))
    normalize = bool(getattr(config, "normalize_observations", False))
    if normalize:
        mean, std = dataset.observation_stats()
        mean, std = mean.reshape(-1), std.reshape(-1)
    else:
        mean, std = np.zeros(obs_dim, np.float32), np.ones(obs_dim, np.float32)
    scale = _reward_scale(dataset, getattr(config, "reward_scaling", "none"))
    bias = float(getattr(config, "reward_bias", 0.0))
    info = DataInfo(obs_dim, int(np.prod(dataset.actions.shape[1:])), mean.tolist(), std.tolist(),
                    low.tolist(), high.tolist(), scale, bias, env_id)

    # One key at a time, so that at most one host temporary exists beside the device copies.
    def observations(x):
        x = x.reshape(n, -1).astype(np.float32, copy=False)
        return (x - mean) / std if normalize else x

    makers = {
        "observations": lambda: observations(dataset.observations),
        "actions": lambda: info.to_agent_action(dataset.actions.reshape(n, -1)),
        "rewards": lambda: (dataset.rewards.astype(np.float32) * scale + bias).astype(np.float32),
        "next_observations": lambda: observations(dataset.next_observations),
        "masks": lambda: 1.0 - dataset.terminals.astype(np.float32),
    }
    return {k: jnp.asarray(make(), dtype=jnp.float32) for k, make in makers.items()}, info


def _load_dataset(dataset):
    from offrl.data import Dataset

    if isinstance(dataset, Dataset):
        return dataset
    try:
        from offrl.data import load
    except ImportError:
        raise ConfigError(f"cannot load dataset {dataset!r}: offrl.data.load is not available in this build; pass a Dataset object.") from None
    return load(str(dataset))


def _describe_dataset(dataset, source) -> str:
    """The name or path the user gave, or the Dataset's own ``source``."""
    return str(source) if not hasattr(source, "observations") else getattr(dataset, "source", "<arrays>")


# ====================================================================== jitted chunks
_CHUNK_FNS: dict[tuple, Any] = {}


def make_chunk_fn(module, num_steps: int, batch_size: int, vmap_seeds: bool):
    """``chunk(agents, data_keys, data) -> (agents, metrics)``: ``num_steps`` scanned updates.

    ``metrics[name]`` has shape ``(seeds, num_steps)`` (``(num_steps,)`` unvmapped). The
    jitted function is cached, so runs with the same algorithm, config and shapes in one
    process compile once.
    """
    cache_key = (module.__name__, num_steps, batch_size, vmap_seeds)
    if cache_key not in _CHUNK_FNS:
        _CHUNK_FNS[cache_key] = _make_chunk_fn(module, num_steps, batch_size, vmap_seeds)
    return _CHUNK_FNS[cache_key]


def _make_chunk_fn(module, num_steps: int, batch_size: int, vmap_seeds: bool):
    import jax
    import jax.numpy as jnp

    from offrl.algos.common import Batch

    def one_seed(agent, data_key, data):
        n = data["rewards"].shape[0]

        def body(agent, _):
            key = jax.random.fold_in(data_key, agent.step)
            idx = jax.random.randint(key, (batch_size,), 0, n)
            batch = Batch(*(data[name][idx] for name in BATCH_FIELDS))
            return module.update(agent, batch)

        return jax.lax.scan(body, agent, None, length=num_steps)

    if not vmap_seeds:
        return jax.jit(one_seed)

    def all_seeds(agents, data_keys, data):
        # Every seed is at the same step, so the step counter enters vmap unbatched: a
        # ``lax.cond`` on it inside an update (TD3's delayed actor step) then stays a real branch
        # instead of becoming a select that computes both sides for every seed.
        axes = jax.tree_util.tree_map(lambda _: 0, agents).replace(step=None)
        out, metrics = jax.vmap(one_seed, in_axes=(axes, 0, None), out_axes=(axes, 0))(
            agents.replace(step=agents.step[0]), data_keys, data)
        return out.replace(step=jnp.broadcast_to(out.step, agents.step.shape)), metrics

    return jax.jit(all_seeds)


def create_agents(module, config, obs_dim: int, action_dim: int, seed: int, seeds: int):
    """``(agents, data_keys)`` stacked over ``seeds``: seed ``i`` uses ``fold_in(PRNGKey(seed), i)``."""
    import jax

    keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.PRNGKey(seed), i))(np.arange(seeds))
    init_keys, data_keys = jax.vmap(lambda k: jax.random.split(k, 2))(keys).swapaxes(0, 1)
    agents = jax.vmap(lambda k: module.create(config, obs_dim, action_dim, k))(init_keys)
    return agents, data_keys


class Trainer:
    """Runs scanned chunks for all seeds (``vmap`` with the shared step counter unbatched, so
    that ``lax.cond`` on the step, e.g. TD3's delayed actor step, stays a real branch; plain
    when there is one seed)."""

    def __init__(self, module, batch_size: int, seeds: int):
        self.module, self.batch_size, self.seeds = module, batch_size, seeds
        self._fns: dict[int, Any] = {}

    def run(self, agents, data_keys, data, num_steps: int):
        import jax

        fn = self._fns.get(num_steps)
        if fn is None:
            fn = self._fns[num_steps] = make_chunk_fn(self.module, num_steps, self.batch_size, self.seeds > 1)
        if self.seeds > 1:
            return fn(agents, data_keys, data)
        squeeze = lambda t: jax.tree_util.tree_map(lambda x: x[0], t)  # noqa: E731
        agent, metrics = fn(squeeze(agents), data_keys[0], data)
        expand = lambda t: jax.tree_util.tree_map(lambda x: x[None], t)  # noqa: E731
        return expand(agent), expand(metrics)


# ====================================================================== evaluation
class Evaluator:
    """Rolls the deterministic policy of every seed for ``episodes`` episodes at once.

    ``seeds x episodes`` Gymnasium envs step in a batched Python loop with ONE jitted policy
    call per env step for all of them. Episode ``k`` resets with ``seed = eval_seed + k``, so
    every evaluation (and every seed) starts from the same states. Besides the raw and
    normalized returns it records the extrapolation monitor: the critic's ``Q(s0, pi(s0))``
    at each episode's start state and the discounted return realised from it, both in the
    agent's reward units (``reward_scale * r + reward_bias``).
    """

    def __init__(self, module, agents, info: DataInfo, env_id: str, episodes: int, seeds: int, discount: float,
                 eval_seed: int = 10_000, metadata: Mapping | None = None):
        import jax

        from offrl.envs import make_env

        self.module, self.info, self.env_id = module, info, env_id
        self.episodes, self.seeds, self.discount, self.eval_seed = episodes, seeds, discount, eval_seed
        self.metadata = dict(metadata or {})
        self.envs = [make_env(env_id) for _ in range(seeds * episodes)]
        self._act, self._q = _policy_fns(module, agents, info)

    def __call__(self, agents) -> dict[str, np.ndarray]:
        """Per-seed arrays ``(seeds, episodes)``: return, length, q_estimate, discounted_return."""
        S, K, info = self.seeds, self.episodes, self.info
        obs = np.zeros((S, K, info.obs_dim), np.float32)
        for i, env in enumerate(self.envs):
            o, _ = env.reset(seed=self.eval_seed + i % K)
            obs[i // K, i % K] = np.asarray(o, np.float32).reshape(-1)
        returns = np.zeros((S, K))
        disc_returns = np.zeros((S, K))
        lengths = np.zeros((S, K), np.int64)
        done = np.zeros((S, K), bool)
        discount_t = np.ones((S, K))
        q0 = None
        while not done.all():
            norm = info.normalize(obs)
            actions = np.asarray(self._act(agents, norm))
            if q0 is None:
                q0 = np.asarray(self._q(agents, norm, actions)) if self._q is not None else np.full((S, K), np.nan)
            env_actions = info.to_env_action(actions)
            for i, env in enumerate(self.envs):
                s, k = divmod(i, K)
                if done[s, k]:
                    continue
                o, r, term, trunc, _ = env.step(env_actions[s, k])
                obs[s, k] = np.asarray(o, np.float32).reshape(-1)
                returns[s, k] += r
                disc_returns[s, k] += discount_t[s, k] * (info.reward_scale * r + info.reward_bias)
                discount_t[s, k] *= self.discount
                lengths[s, k] += 1
                done[s, k] = term or trunc
        from offrl.envs import normalized_score

        score = normalized_score(self.env_id, returns, self.metadata)
        return {
            "return": returns,
            "normalized_score": np.full((S, K), np.nan) if score is None else np.asarray(score),
            "length": lengths,
            "q_estimate": q0,
            "discounted_return": disc_returns,
        }

    def close(self):
        for env in self.envs:
            env.close()


_POLICY_FNS: dict[str, tuple] = {}


def _policy_fns(module, agents, info: DataInfo):
    """Jitted, seed-vmapped ``act`` and ``q_value`` (``None`` without a critic), cached per algorithm."""
    import jax

    if module.__name__ not in _POLICY_FNS:
        one = jax.tree_util.tree_map(lambda x: x[0], agents)
        probe = jax.eval_shape(lambda a: module.q_value(a, np.zeros((1, info.obs_dim), np.float32),
                                                        np.zeros((1, info.action_dim), np.float32)), one)
        q_fn = jax.jit(jax.vmap(module.q_value)) if probe is not None else None
        _POLICY_FNS[module.__name__] = (jax.jit(jax.vmap(module.act)), q_fn)
    return _POLICY_FNS[module.__name__]


def summarise_evaluation(result: dict[str, np.ndarray]) -> list[dict[str, float]]:
    """One dict per seed: episode means, plus ``q_ratio = mean Q(s0, pi(s0)) / mean realised
    return`` and ``q_overestimation = mean Q(s0, pi(s0)) - mean realised return`` (positive:
    the critic promises more than the policy delivers, whatever the sign of the rewards; for
    negative returns a ratio below 1 is an overestimate)."""
    rows = []
    for s in range(result["return"].shape[0]):
        q = float(np.mean(result["q_estimate"][s]))
        g = float(np.mean(result["discounted_return"][s]))
        rows.append({
            "eval/return": float(np.mean(result["return"][s])),
            "eval/return_std": float(np.std(result["return"][s])),
            "eval/normalized_score": float(np.mean(result["normalized_score"][s])),
            "eval/length": float(np.mean(result["length"][s])),
            "eval/q_estimate": q,
            "eval/discounted_return": g,
            "eval/q_ratio": q / g if g != 0 and math.isfinite(q) else float("nan"),
            "eval/q_overestimation": q - g,
        })
    return rows


# ====================================================================== logging
class MetricsLog:
    """``metrics.jsonl`` (one row per seed and logged step) and ``metrics.csv`` next to it,
    plus optional TensorBoard / Weights & Biases writers."""

    def __init__(self, folder: Path | None, rows: list[dict] | None = None, tensorboard: bool = False,
                 wandb: bool = False, run_config: dict | None = None):
        self.folder = folder
        self.rows: list[dict] = list(rows or [])
        self._tb = self._wandb = None
        if tensorboard:
            try:
                from tensorboardX import SummaryWriter
            except ImportError:
                raise ConfigError("--tensorboard needs the tensorboardX package; pip install tensorboardX (or offrl[logging]).") from None
            self._tb = SummaryWriter(str(folder / "tensorboard")) if folder else None
        if wandb:
            try:
                import wandb as wandb_module
            except ImportError:
                raise ConfigError("--wandb needs the wandb package; pip install wandb (or offrl[logging]).") from None
            self._wandb = wandb_module.init(project="offrl", config=run_config, dir=str(folder) if folder else None)

    def add(self, rows: list[dict]) -> None:
        self.rows.extend(rows)
        if self.folder is not None:
            with open(self.folder / "metrics.jsonl", "a") as fh:
                for row in rows:
                    fh.write(json.dumps(_jsonable(row)) + "\n")
        for row in rows:
            scalars = {k: v for k, v in row.items() if k not in ("step", "seed") and isinstance(v, (int, float))}
            if self._tb is not None:
                for k, v in scalars.items():
                    self._tb.add_scalar(f"seed{row['seed']}/{k}", v, row["step"])
            if self._wandb is not None:
                self._wandb.log({f"seed{row['seed']}/{k}": v for k, v in scalars.items()}, step=int(row["step"]))

    def write_csv(self) -> None:
        if self.folder is None:
            return
        columns: list[str] = []
        for row in self.rows:
            columns.extend(k for k in row if k not in columns)
        with open(self.folder / "metrics.csv", "w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=columns)
            writer.writeheader()
            writer.writerows(self.rows)

    def close(self) -> None:
        self.write_csv()
        if self._tb is not None:
            self._tb.close()
        if self._wandb is not None:
            self._wandb.finish()


def _jsonable(row: dict) -> dict:
    out = {}
    for k, v in row.items():
        if isinstance(v, float) and not math.isfinite(v):
            out[k] = None if math.isnan(v) else (1e308 if v > 0 else -1e308)
        else:
            out[k] = v
    return out


def read_metrics(path: Path) -> list[dict]:
    rows = []
    if path.exists():
        for line in path.read_text().splitlines():
            if line.strip():
                row = json.loads(line)
                rows.append({k: (float("nan") if v is None else v) for k, v in row.items()})
    return rows


# ====================================================================== runs
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


def _run_record(algo, config, settings, info) -> dict:
    from offrl import __version__
    from offrl.algos.common import config_to_dict

    return {"algo": algo, "config": config_to_dict(config), "settings": settings,
            "data": dataclasses.asdict(info), "offrl_version": __version__}


def train(
    algo: str = "iql",
    dataset: Any = None,
    steps: int = 100_000,
    seeds: int = 1,
    seed: int = 0,
    eval_every: int = 10_000,
    eval_episodes: int = 10,
    out: str | Path | None = None,
    config_overrides: Mapping[str, Any] | None = None,
    env: str | None = None,
    resume: bool = False,
    log_every: int = 1000,
    tensorboard: bool = False,
    wandb: bool = False,
    progress: bool = True,
    stop_at: int | None = None,
) -> Run:
    """Train ``algo`` on ``dataset`` for ``steps`` updates with ``seeds`` vmapped seeds.

    ``dataset`` is a registry name, a file path or an :class:`offrl.data.Dataset`. ``env``
    (default: the dataset's ``metadata['env_id']``) is the Gymnasium id used for evaluation;
    without one, no evaluation runs. ``out`` is the run folder (``config.json``,
    ``metrics.jsonl``, ``metrics.csv``, ``checkpoints/``, ``plots/``); ``resume=True``
    continues from ``out``'s latest checkpoint. ``stop_at`` ends the run early at that step
    (after checkpointing), as a killed run would; used to test resumption.

    Example::

        run = offrl.train("iql", "pendulum-medium-v0", steps=50_000, seeds=3, out="runs/iql")
        run.final_scores        # normalized score of each seed at the last evaluation
    """
    import jax

    from offrl.algos import get_algorithm
    from offrl.algos.common import apply_overrides, config_from_dict

    module = get_algorithm(algo)
    algo = module.__name__.split(".")[-1]
    folder = Path(out) if out is not None else None
    for name, value in (("steps", steps), ("seeds", seeds), ("eval_every", eval_every), ("log_every", log_every)):
        if int(value) < 1:
            raise ConfigError(f"--{name.replace('_', '-')} is {value}; it must be a positive integer.")
    previous = None
    if resume:
        if folder is None or not (folder / "config.json").exists():
            raise ConfigError(f"--resume needs an existing run folder with config.json, but {folder} has none; drop --resume to start a new run.")
        previous = json.loads((folder / "config.json").read_text())
        if previous["algo"] != algo:
            raise ConfigError(f"--resume: {folder} was trained with --algo {previous['algo']}, not {algo}.")
        config = config_from_dict(module.Config, previous["config"])
        config = apply_overrides(config, config_overrides) if config_overrides else config
    else:
        config = apply_overrides(module.Config(), config_overrides)
        if hasattr(config, "schedule_steps") and config.schedule_steps is None:
            config = dataclasses.replace(config, schedule_steps=int(steps))
    ds = _load_dataset(dataset)
    env_id = env or (previous["settings"].get("env") if previous else None) or ds.metadata.get("env_id")
    data, info = prepare_data(ds, config, env_id)
    settings = dict(dataset=_describe_dataset(ds, dataset), env=env_id, steps=int(steps), seeds=int(seeds),
                              seed=int(seed), eval_every=int(eval_every), eval_episodes=int(eval_episodes),
                              log_every=int(log_every), transitions=len(ds),
                              references=_references(env_id, ds.metadata))
    if previous:
        for key in ("seeds", "seed"):
            if previous["settings"][key] != settings[key]:
                raise ConfigError(f"--resume: {folder} was trained with --{key} {previous['settings'][key]}; pass the same value.")
    if folder is not None:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "checkpoints").mkdir(exist_ok=True)
        (folder / "plots").mkdir(exist_ok=True)
        if not resume and (folder / "checkpoints" / "latest.json").exists():
            raise ConfigError(f"run folder {folder} already holds a run; pass --resume to continue it or choose another --out.")
        (folder / "config.json").write_text(json.dumps(_run_record(algo, config, settings, info), indent=2))

    log = MetricsLog(folder, rows=[], tensorboard=tensorboard, wandb=wandb,
                     run_config=_run_record(algo, config, settings, info))
    agents, data_keys = create_agents(module, config, info.obs_dim, info.action_dim, seed, seeds)
    rows: list[dict] = []
    if resume:
        from offrl.checkpoint import latest_checkpoint, load_checkpoint

        latest = latest_checkpoint(folder / "checkpoints")
        if latest is not None:
            state = load_checkpoint(latest["path"], {"agent": agents, "data_keys": data_keys})
            agents = jax.tree_util.tree_map(jax.numpy.asarray, state["agent"])
            data_keys = jax.numpy.asarray(state["data_keys"])
            rows = [r for r in read_metrics(folder / "metrics.jsonl") if r["step"] <= latest["step"]]
        if folder is not None:
            with open(folder / "metrics.jsonl", "w") as fh:
                for r in rows:
                    fh.write(json.dumps(_jsonable(r)) + "\n")
    elif folder is not None:
        (folder / "metrics.jsonl").write_text("")

    log.rows = rows
    evaluator = None
    if env_id and eval_episodes > 0:
        evaluator = Evaluator(module, agents, info, env_id, eval_episodes, seeds,
                              getattr(config, "discount", 0.99), metadata=_reference_metadata(settings))
    trainer = Trainer(module, config.batch_size, seeds)
    run = Run(folder, algo, config, settings, info, agents, log.rows)
    step = int(np.asarray(agents.step).reshape(-1)[0])
    end = int(steps) if stop_at is None else min(int(steps), int(stop_at))
    last_eval: str = ""
    bar = _Progress(progress, total=int(steps), start=step, title=f"{algo} x{seeds}")
    try:
        while step < end:
            boundary = min(_next_multiple(step, log_every), _next_multiple(step, eval_every), end)
            n = boundary - step
            t0 = time.perf_counter()
            new_agents, metrics = trainer.run(agents, data_keys, data, n)
            metrics = jax.device_get(metrics)
            elapsed = time.perf_counter() - t0
            _check_finite(metrics, step, folder)
            agents, step = new_agents, boundary
            chunk_rows = [{"step": step, "seed": s, "time": time.time(), "steps_per_s": n / max(elapsed, 1e-9),
                           **{k: float(np.mean(v[s])) for k, v in sorted(metrics.items())}} for s in range(seeds)]
            if evaluator is not None and (step % eval_every == 0 or step == int(steps)):
                per_seed = summarise_evaluation(evaluator(agents))
                for row, ev in zip(chunk_rows, per_seed):
                    row.update(ev)
                last_eval = _eval_text(per_seed)
            log.add(chunk_rows)
            if folder is not None and (step % eval_every == 0 or step == end):
                _save(folder, agents, data_keys, step)
                log.write_csv()
            bar.update(step, n / max(elapsed, 1e-9), last_eval)
    finally:
        bar.close()
        log.close()
        if evaluator is not None:
            evaluator.close()
    run.agent = agents
    run.metrics = log.rows
    if folder is not None and run.evaluations():
        from offrl.plotting import plot_runs

        plot_runs([run], folder / "plots")
    return run


def _references(env_id, metadata) -> list[float] | None:
    """``[R_random, R_expert]`` for the normalized score (dataset metadata first), or None."""
    from offrl.envs import reference_returns

    ref = reference_returns(env_id, dict(metadata or {})) if env_id else None
    return None if ref is None else [float(ref[0]), float(ref[1])]


def _reference_metadata(settings: dict) -> dict:
    ref = settings.get("references")
    return {} if not ref else {"ref_min_score": ref[0], "ref_max_score": ref[1]}


def _next_multiple(step: int, every: int) -> int:
    return (step // every + 1) * every


def _save(folder: Path, agents, data_keys, step: int) -> None:
    from offrl.checkpoint import save_checkpoint

    save_checkpoint(folder / "checkpoints", {"agent": agents, "data_keys": data_keys}, step)


def _check_finite(metrics: dict, step: int, folder: Path | None) -> None:
    """Raise :class:`DivergenceError` naming the first non-finite metric and its step."""
    first = None
    for name, values in metrics.items():
        values = np.asarray(values)
        bad = ~np.isfinite(values)
        if bad.any():
            seed_idx, offset = np.argwhere(bad)[0] if values.ndim == 2 else (0, np.argwhere(bad)[0][0])
            if first is None or offset < first[2]:
                first = (name, int(seed_idx), int(offset), float(values[tuple(np.argwhere(bad)[0])]))
    if first is None:
        return
    name, seed_idx, offset, value = first
    where = ""
    if folder is not None:
        from offrl.checkpoint import latest_checkpoint

        latest = latest_checkpoint(folder / "checkpoints")
        where = f" The last good checkpoint (step {latest['step']}) is kept in {folder / 'checkpoints'}." if latest else " No checkpoint was saved before it."
    raise DivergenceError(
        f"training diverged: '{name}' became {value} at step {step + offset + 1} (seed {seed_idx});"
        f" lower the learning rates or normalise observations/rewards.{where}")


def _eval_text(per_seed: list[dict]) -> str:
    score = np.array([r["eval/normalized_score"] for r in per_seed])
    ret = np.array([r["eval/return"] for r in per_seed])
    if np.all(np.isfinite(score)):
        return f"score {score.mean():.1f}±{score.std():.1f}"
    return f"return {ret.mean():.1f}±{ret.std():.1f}"


class _Progress:
    """A rich progress bar with steps/s, ETA and the last evaluation (no-op when disabled)."""

    def __init__(self, enabled: bool, total: int, start: int, title: str):
        self.progress = None
        if not enabled:
            return
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

        self.progress = Progress(
            TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
            TextColumn("{task.fields[rate]} steps/s"), TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
            TextColumn("{task.fields[last_eval]}"), transient=False)
        self.progress.start()
        self.task = self.progress.add_task(title, total=total, completed=start, rate="-", last_eval="")

    def update(self, step: int, rate: float, last_eval: str) -> None:
        if self.progress is not None:
            self.progress.update(self.task, completed=step, rate=f"{rate:,.0f}", last_eval=last_eval)

    def close(self) -> None:
        if self.progress is not None:
            self.progress.stop()


# ====================================================================== loading, evaluating
def load_run(path: str | Path, with_agent: bool = True) -> Run:
    """A finished or interrupted run from its folder, with the agent at its latest checkpoint
    (``with_agent=False``: metrics and config only, no checkpoint restored)."""
    import jax

    from offrl.algos import get_algorithm
    from offrl.algos.common import config_from_dict
    from offrl.checkpoint import latest_checkpoint, load_checkpoint

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
    latest = latest_checkpoint(folder / "checkpoints")
    if latest is None:
        raise OffrlError(f"{folder} has no checkpoint yet (checkpoints/latest.json is missing); train it longer or --resume it.")
    state = load_checkpoint(latest["path"], {"agent": agents, "data_keys": data_keys})
    agents = jax.tree_util.tree_map(jax.numpy.asarray, state["agent"])
    return Run(folder, record["algo"], config, settings, info, agents, metrics)


def evaluate(run: Run | str | Path, episodes: int = 10, env: str | None = None, eval_seed: int = 20_000) -> dict:
    """Roll each seed's deterministic policy for ``episodes`` episodes.

    Returns ``{"per_seed": [dict, ...], "return": (mean, std), "normalized_score": (mean, std)}``
    over seeds; the per-seed dicts carry ``eval/return``, ``eval/normalized_score``,
    ``eval/q_estimate``, ``eval/discounted_return`` and ``eval/q_ratio``.
    """
    if not isinstance(run, Run):
        run = load_run(run)
    env_id = env or run.info.env_id
    if not env_id:
        raise ConfigError("this run has no environment id to evaluate in; pass --env (a Gymnasium id such as Hopper-v5).")
    seeds = int(np.asarray(run.agent.step).shape[0])
    evaluator = Evaluator(run.module, run.agent, run.info, env_id, episodes, seeds,
                          getattr(run.config, "discount", 0.99), eval_seed=eval_seed,
                          metadata=_reference_metadata(run.settings) if env_id == run.info.env_id else None)
    try:
        per_seed = summarise_evaluation(evaluator(run.agent))
    finally:
        evaluator.close()
    ret = np.array([r["eval/return"] for r in per_seed])
    score = np.array([r["eval/normalized_score"] for r in per_seed])
    return {"per_seed": per_seed, "return": (float(ret.mean()), float(ret.std())),
            "normalized_score": (float(score.mean()), float(score.std())), "episodes": episodes, "env": env_id}


# ====================================================================== throughput
def measure_throughput(algo: str, observations, actions, rewards, next_observations, terminals=None,
                       num_updates: int = 1000, seeds: int = 1, config_overrides: Mapping | None = None,
                       repeats: int = 3, details: bool = False):
    """Training updates per second of ``algo`` on the given arrays (no evaluation, no logging).

    Compiles one scanned chunk of ``num_updates`` updates, then times ``repeats`` chunks and
    returns the best ``seeds * num_updates / seconds`` (wall clock). Actions are assumed to be
    in ``[-1, 1]``. ``details=True`` returns ``{"steps_per_s", "cpu_s_per_1000_steps",
    "compile_s"}``; the process CPU time is a useful second number on a shared machine, where
    wall-clock rates fall with other people's load.
    """
    import jax
    import jax.numpy as jnp

    from offrl.algos import get_algorithm
    from offrl.algos.common import apply_overrides

    module = get_algorithm(algo)
    config = apply_overrides(module.Config(), config_overrides)
    if hasattr(config, "schedule_steps") and config.schedule_steps is None:
        config = dataclasses.replace(config, schedule_steps=1_000_000)
    n = len(rewards)
    data = {
        "observations": jnp.asarray(observations, jnp.float32).reshape(n, -1),
        "actions": jnp.asarray(actions, jnp.float32).reshape(n, -1),
        "rewards": jnp.asarray(rewards, jnp.float32).reshape(n),
        "next_observations": jnp.asarray(next_observations, jnp.float32).reshape(n, -1),
        "masks": 1.0 - jnp.asarray(np.zeros(n) if terminals is None else terminals, jnp.float32).reshape(n),
    }
    agents, data_keys = create_agents(module, config, data["observations"].shape[1], data["actions"].shape[1], 0, seeds)
    trainer = Trainer(module, config.batch_size, seeds)
    t0 = time.perf_counter()
    agents, metrics = trainer.run(agents, data_keys, data, num_updates)
    jax.block_until_ready(metrics)
    compile_s = time.perf_counter() - t0
    best, best_cpu = float("inf"), float("inf")
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        agents, metrics = trainer.run(agents, data_keys, data, num_updates)
        jax.block_until_ready((agents, metrics))
        best = min(best, time.perf_counter() - t0)
        best_cpu = min(best_cpu, time.process_time() - c0)
    rate = seeds * num_updates / best
    if details:
        return {"steps_per_s": rate, "cpu_s_per_1000_steps": 1000 * best_cpu / (seeds * num_updates), "compile_s": compile_s}
    return rate
