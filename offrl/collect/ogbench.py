"""OGBench-style datasets made here with the scripted oracles of its manipulation envs.

OGBench (Park et al. 2025) builds its cube, scene and puzzle data this way: the env, made with
``mode='data_collection'`` and ``terminate_at_goal=False``, draws a target task (move a cube,
press a button, open the drawer, ...); the oracle for that task acts until its own plan is
finished, then the env draws the next target, so one episode of ``max_episode_steps`` steps
(1001 in the released files: 1000 transitions each) chains several tasks. Two dataset types:

=========  ======================================================================================
``play``   ``PlanOracle``: follows key frames interpolated into a plan, with temporally correlated
           noise (``noise``, smoothed by ``noise_smoothing``); non-Markovian
``noisy``  ``MarkovOracle``: closed-loop, plus ``a + N(0, xi * [1, 1, 1, 3, 10])`` Gaussian noise
           with ``xi ~ U(0, noise)`` drawn per episode; steps below ``min_norm`` are scaled up
=========  ======================================================================================

With probability ``p_random_action`` a step's action is uniform in ``[-1, 1]^5`` instead. A cube
target is stacked on another cube with probability ``p_stack`` drawn per episode (single 0;
double U(0, 0.25); triple U(0.05, 0.35); quadruple U(0.1, 0.5); octuple U(0, 0.35); else 0.5).
Scene episodes in which the cube leaves the visible part of the table are discarded and
collected again (OGBench's health check). The released files used ``noise=0.1``,
``noise_smoothing=0.5``, ``min_norm=0.4`` and ``p_random_action`` 0 (play), 0.1 (cube and scene
noisy) or 0.2 (puzzle noisy). The env steps through :func:`offrl.rollout.collect_steps`; the rows
are written in OGBench's layout (:mod:`offrl.data.ogbench`): ``observations, actions,
terminals, qpos, qvel`` and, for scene and puzzle, ``button_states``.

Example::

    train, val, facts = collect_oracle("cube-single-v0", OracleConfig(episodes=10, val_episodes=1))
    save_ogbench(train, "cube-single-play-v0.npz"); save_ogbench(val, "cube-single-play-v0-val.npz")
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from offrl.config import ANY_INT, NON_NEGATIVE, NON_NEGATIVE_INT, POSITIVE_INT, UNIT, OneOf, check_config, param
from offrl.errors import ConfigError

#: the env families that ship oracles.
ORACLE_FAMILIES = ("cube", "scene", "puzzle")


@dataclass(frozen=True)
class OracleConfig:
    """The flags of ``offrl collect oracle``.

    dataset_type: play (plan-following oracle, correlated noise) or noisy (closed-loop oracle, Gaussian noise).
    episodes: episodes of the training file (OGBench: 1000 for cube-single/double, scene, puzzle-3x3/4x4).
    val_episodes: episodes of the -val.npz file written beside it (OGBench: episodes/10; 0: no file).
    max_episode_steps: env steps per episode (OGBench: 1001, i.e. 1000 transitions).
    noise: play: the plan's noise level; noisy: the upper end of the per-episode Gaussian scale xi.
    noise_smoothing: play only: the smoothing of the plan's noise.
    min_norm: noisy only: the smallest norm of the oracle's position step.
    p_random_action: probability of a uniform random action instead of the oracle's.
    seed: seeds the env resets and the noise.
    """

    COMMAND_FLAGS: ClassVar[bool] = True

    dataset_type: str = param("play", OneOf(("play", "noisy")))
    episodes: int = param(1000, POSITIVE_INT)
    val_episodes: int = param(0, NON_NEGATIVE_INT)
    max_episode_steps: int = param(1001, POSITIVE_INT)
    noise: float = param(0.1, NON_NEGATIVE)
    noise_smoothing: float = param(0.5, NON_NEGATIVE)
    min_norm: float = param(0.4, NON_NEGATIVE)
    p_random_action: float = param(0.0, UNIT)
    seed: int = param(0, ANY_INT)

    def __post_init__(self) -> None:
        check_config(self)
        if self.max_episode_steps < 2:
            raise ConfigError(f"--max-episode-steps must be at least 2 (an episode of L steps gives L - 1 transitions), got {self.max_episode_steps}.")


def dataset_file_name(env_id: str, dataset_type: str) -> str:
    """``("cube-single-v0", "play")`` -> ``"cube-single-play-v0"``, OGBench's naming."""
    head, version = env_id.rsplit("-", 1)
    return f"{head}-{dataset_type}-{version}"


def check_oracle_env(env_id: str) -> None:
    """Refuse, in one line, an id without oracles (locomotion, visual, single-task)."""
    words = env_id.split("-")
    if words[0] not in ORACLE_FAMILIES or not env_id.rsplit("-", 1)[-1].startswith("v"):
        raise ConfigError(f"--env {env_id}: OGBench ships oracles for its state-based manipulation envs only; pass "
                          f"cube-single-v0, cube-double-v0, scene-v0, puzzle-3x3-v0, ...")
    if "singletask" in words:
        base = "-".join(w for w in words if w != "singletask" and not w.startswith("task"))
        raise ConfigError(f"--env {env_id}: the oracles collect in the goal-conditioned env; pass --env {base} "
                          f"and load the data as a single-task dataset name.")


def cube_stack_probability(env_id: str, rng: np.random.Generator) -> float:
    """The per-episode probability of stacking the target cube (see the module docstring)."""
    ranges = {"single": (0.0, 0.0), "double": (0.0, 0.25), "triple": (0.05, 0.35),
              "quadruple": (0.1, 0.5), "octuple": (0.0, 0.35)}
    for word, (lo, hi) in ranges.items():
        if word in env_id.split("-"):
            return float(rng.uniform(lo, hi)) if hi > lo else lo
    return 0.5


def scene_episode_healthy(qpos: np.ndarray) -> bool:
    """OGBench's scene check: the cube (qpos[14:17]) never goes too far right (y >= 0.29) nor far
    left (y <= -0.3) unless it lies in the drawer (0.06 <= z <= 0.08)."""
    y, z = qpos[:, 15], qpos[:, 16]
    return not ((y >= 0.29).any() or ((y <= -0.3) & ((z < 0.06) | (z > 0.08))).any())


def _make_oracles(env, family: str, config: OracleConfig) -> dict:
    from ogbench.manipspace.oracles.markov.button_markov import ButtonMarkovOracle
    from ogbench.manipspace.oracles.markov.cube_markov import CubeMarkovOracle
    from ogbench.manipspace.oracles.markov.drawer_markov import DrawerMarkovOracle
    from ogbench.manipspace.oracles.markov.window_markov import WindowMarkovOracle
    from ogbench.manipspace.oracles.plan.button_plan import ButtonPlanOracle
    from ogbench.manipspace.oracles.plan.cube_plan import CubePlanOracle
    from ogbench.manipspace.oracles.plan.drawer_plan import DrawerPlanOracle
    from ogbench.manipspace.oracles.plan.window_plan import WindowPlanOracle

    if config.dataset_type == "play":
        plan = dict(env=env, noise=config.noise, noise_smoothing=config.noise_smoothing)
        table = {"cube": lambda: CubePlanOracle(**plan), "button": lambda: ButtonPlanOracle(**plan),
                 "drawer": lambda: DrawerPlanOracle(**plan), "window": lambda: WindowPlanOracle(**plan)}
        if family == "puzzle":
            table["button"] = lambda: ButtonPlanOracle(gripper_always_closed=True, **plan)
    else:
        markov = dict(env=env, min_norm=config.min_norm)
        table = {"cube": lambda: CubeMarkovOracle(max_step=100 if family == "scene" else 200, **markov),
                 "button": lambda: ButtonMarkovOracle(gripper_always_closed=family == "puzzle", **markov),
                 "drawer": lambda: DrawerMarkovOracle(**markov), "window": lambda: WindowMarkovOracle(**markov)}
    tasks = {"cube": ("cube",), "scene": ("cube", "button", "drawer", "window"), "puzzle": ("button",)}[family]
    return {task: table[task]() for task in tasks}


class OraclePolicy:
    """A :mod:`offrl.rollout` policy driving OGBench's oracles; the carry flags envs that start an episode.

    It reads the privileged state the oracles need from each env (``compute_ob_info``), switches
    to the env's next target when the current oracle is done, and records ``qpos``, ``qvel`` (and
    ``button_states``) of the state the action is taken in as extras.
    """

    def __init__(self, envs, env_id: str, config: OracleConfig, rng: np.random.Generator):
        self.envs, self.env_id, self.config, self.rng = envs, env_id, config, rng
        family = env_id.split("-")[0]
        self.oracles = [_make_oracles(env, family, config) for env in envs]
        self.agent = [None] * len(envs)
        self.p_stack = [0.0] * len(envs)
        self.xi = [0.0] * len(envs)
        self.tasks_done = 0

    def __call__(self, params, carry, obs, key):
        n = len(self.envs)
        actions = np.zeros((n, 5), np.float32)
        extras: dict[str, list] = {"qpos": [], "qvel": []}
        for i, env in enumerate(self.envs):
            base = env.unwrapped
            info = base.compute_ob_info()
            extras["qpos"].append(info["qpos"])
            extras["qvel"].append(info["qvel"])
            if "button_states" in info:
                extras.setdefault("button_states", []).append(info["button_states"])
            if carry[i]:
                self.p_stack[i] = cube_stack_probability(self.env_id, self.rng)
                self.xi[i] = float(self.rng.uniform(0.0, self.config.noise))
                self._start(i, obs[i], info)
            elif self.agent[i].done:
                self.tasks_done += 1
                ob, _ = base.set_new_target(p_stack=self.p_stack[i])
                info = base.compute_ob_info()
                self._start(i, ob, info)
            if self.rng.uniform() < self.config.p_random_action:
                action = self.rng.uniform(-1.0, 1.0, 5)
            else:
                action = np.asarray(self.agent[i].select_action(obs[i], info), np.float64)
                if self.config.dataset_type == "noisy":
                    action = action + self.rng.normal(0.0, self.xi[i] * np.array([1, 1, 1, 3, 10]))
            actions[i] = np.clip(action, -1.0, 1.0)
        return actions, np.zeros(n, bool), {k: np.stack(v) for k, v in extras.items()}

    def _start(self, i: int, ob, info) -> None:
        self.agent[i] = self.oracles[i][info["privileged/target_task"]]
        self.agent[i].reset(ob, info)


def collect_oracle(env_id: str, config: OracleConfig, progress: bool = False) -> tuple[dict, dict | None, dict]:
    """``(train rows, val rows or None, facts)``: rows in OGBench's layout, ``config.episodes``
    (and ``config.val_episodes``) whole episodes each; ``facts``: ``tasks_completed`` (oracle
    tasks finished, both splits) and ``attempts`` (collection rounds; scene redoes unhealthy
    episodes). Seeds NumPy's global generator with ``config.seed`` too: OGBench's plan oracles
    draw their noise from it."""
    import jax

    from offrl.envs import register_optional_envs
    from offrl.progress import ProgressBar
    from offrl.rollout import VectorEnv, collect_steps

    check_oracle_env(env_id)
    register_optional_envs(env_id)
    np.random.seed(config.seed % 2**32)
    rng = np.random.default_rng(config.seed)
    T = config.max_episode_steps
    wanted = config.episodes + config.val_episodes
    venv = VectorEnv(env_id, 1, terminate_at_goal=False, mode="data_collection", max_episode_steps=T)
    policy = OraclePolicy(venv.envs, env_id, config, rng)
    bar = ProgressBar(progress, total=wanted * T, title=f"oracle {dataset_file_name(env_id, config.dataset_type)}")
    episodes: list[dict] = []
    attempt = 0
    try:
        while len(episodes) < wanted:
            rows = collect_steps(venv, policy, None, [(wanted - len(episodes)) * T], seed=config.seed * 7919 + attempt,
                                 key=jax.random.PRNGKey(0), carry=np.ones(1, bool),
                                 reset_carry=lambda carry, restart: carry | restart, progress=bar)
            attempt += 1
            for k in range(len(rows["actions"]) // T):
                part = slice(k * T, (k + 1) * T)
                episode = {"observations": rows["observations"][part], "actions": rows["actions"][part],
                           "terminals": (rows["terminals"] | rows["timeouts"])[part],
                           **{key[len("infos/"):]: v[part] for key, v in rows.items() if key.startswith("infos/")}}
                if env_id.startswith("scene") and not scene_episode_healthy(episode["qpos"]):
                    continue
                episodes.append(episode)
    finally:
        bar.close()
        venv.close()
    join = lambda eps: {k: np.concatenate([e[k] for e in eps]) for k in eps[0]}  # noqa: E731
    train = join(episodes[:config.episodes])
    val = join(episodes[config.episodes:]) if config.val_episodes else None
    return train, val, {"tasks_completed": policy.tasks_done, "attempts": attempt}
