"""The one online learner: environment steps -> device replay -> scanned updates, for every member at once.

Offline -> online fine-tuning (:mod:`offrl.finetuning`) and both behaviour learners of
``offrl collect`` (SAC, DQN: :mod:`offrl.collect.train`, :mod:`offrl.collect.discrete`) run it.
Per :meth:`OnlineLearner.chunk`::

    for t in range(update_every):                    # Python: one jitted action call per env step
        agent_a, env_a, logged = choose(agents, obs, env_step + t)   # the caller's action rule
        transition = rollout.step(env_a)              # offrl.rollout: one env per member
    buffer = add_rows(buffer, the chunk's rows)       # jitted, on the device (offrl.replay)
    agents = scan(update_every * updates_per_step updates on mixed_batch(sample, offline, buffer, key, B, mix_ratio))

Members (the seeds) each have their own env and replay buffer; the offline data, when a batch
mixes it in, is shared. Minibatch keys are ``fold_in(data_key, agent.step)``, as offline, so a run
resumed from its agents, data keys and buffers draws the minibatches the uninterrupted run drew.
No update runs before ``start_steps`` env steps; rows are still stored.

Minibatches (:func:`mixed_batch`): exactly ``round(B * mix_ratio)`` offline rows, drawn by the
spec's ``sample`` hook (the engine's i.i.d. sampler by default), then the rest i.i.d. from the
member's buffer; the two parts share the buffer's keys, so every array an algorithm's
``extra_arrays`` put beside the offline data is a buffer row too, filled online by
``online_extras`` or by the successor rule below.

Successor rows (a documented rule of the buffer, not of any algorithm): when the rows hold
``next_actions`` (with ``next_action_known``), as the offline data do when an algorithm's
``extra_arrays`` supply the data's next action ``a'_D``, an online row's ``next_actions`` is the
agent-space action taken at the next env step of the same episode, the online counterpart of the
dataset's next action (both are the behaviour policy's), with ``next_action_known = 1``. It is
stored once that action is chosen, in this chunk or at the start of the next one; until then,
and for an episode's last row (terminal, timeout, or cut by :meth:`OnlineLearner.restart`), the
row holds its own action with ``next_action_known = 0``.

Per-episode arrays: an algorithm whose spec declares ``online_extras(rewards, terminal, config)``
gets, when an episode ends (or is cut by :meth:`restart`), that function's per-row values written
over the episode's rows; until then every key of ``online_extras_fill`` holds its fill value.

:func:`carry_over` moves an offline agent's parameters and optimiser state into the online
agent's structure (the learning-rate rule of the online phase; see its docstring).
"""

from __future__ import annotations

from offrl.engine.carry import carry_over  # noqa: F401  (re-exported: fine-tuning's optimiser rule)

from typing import Any, Callable, Mapping

import numpy as np

TRANSITION_ROW = ("observations", "actions", "rewards", "next_observations", "masks")
#: rows the learner fills itself when the buffer holds them: the next env step's action (see the module docstring).
SUCCESSOR_ROW = ("next_actions", "next_action_known")


def transition_row(obs_dim: int, action_shape: tuple = (), action_dtype=np.float32, **extras) -> dict:
    """One example row of the replay buffer: the five transition fields (+ ``extras``: name -> example value)."""
    return {"observations": np.zeros(obs_dim, np.float32), "actions": np.zeros(action_shape, action_dtype),
            "rewards": np.zeros((), np.float32), "next_observations": np.zeros(obs_dim, np.float32),
            "masks": np.zeros((), np.float32), **{k: np.asarray(v) for k, v in extras.items()}}


def spec_explore(module, keys, to_agent_obs: Callable, to_env_action: Callable) -> Callable:
    """The action rule of fine-tuning: the spec's ``explore(agent, obs, key)`` for every member, keyed
    ``fold_in(keys[member], env_step)``; returns ``(agent-space actions, env actions, {})``."""
    import jax

    from offrl.algos import algorithm_spec

    explore = algorithm_spec(module).explore
    explore_all = jax.jit(jax.vmap(lambda agent, obs, key, t: explore(agent, obs[None], jax.random.fold_in(key, t))[0],
                                   in_axes=(0, 0, 0, None)))

    def choose(agents, obs, env_step):
        actions = np.asarray(explore_all(agents, to_agent_obs(obs), keys, env_step))
        return actions, to_env_action(actions), {}

    return choose


def mixed_batch(sample: Callable, offline, buffer, key, batch_size: int, offline_fraction: float):
    """A :class:`offrl.algos.common.Batch` of exactly ``n = round(batch_size * offline_fraction)``
    rows drawn from ``offline`` by ``sample(offline, key, n)`` (the spec's sampler) followed by
    ``batch_size - n`` i.i.d. filled rows of ``buffer`` (:func:`offrl.replay.sample_rows`).

    Keys are split as :func:`offrl.replay.sample_mixed` splits them, so with the default sampler
    the rows are the ones it draws. The mixed batch has the buffer's keys (the offline batch must
    hold them); one source only has that source's keys.
    """
    import jax
    import jax.numpy as jnp

    from offrl.algos.common import Batch
    from offrl.replay import sample_rows

    if not 0.0 <= offline_fraction <= 1.0:
        raise ValueError(f"offline_fraction must lie in [0, 1], got {offline_fraction}")
    n_offline = int(round(batch_size * offline_fraction))
    n_online = batch_size - n_offline
    if n_offline and offline is None:
        raise ValueError("mixed_batch needs offline data when offline_fraction > 0")
    if n_online and buffer is None:
        raise ValueError("mixed_batch needs a buffer when offline_fraction < 1")
    offline_key, online_key = jax.random.split(key)
    if n_online == 0:
        return sample(offline, offline_key, n_offline)
    online = sample_rows(buffer, online_key, n_online)
    if n_offline == 0:
        return Batch.from_rows(online)
    drawn = sample(offline, offline_key, n_offline)
    rows = {**{k: getattr(drawn, k) for k in TRANSITION_ROW}, **drawn.extras}
    missing = sorted(set(online) - set(rows))
    if missing:
        raise KeyError(f"the offline minibatch lacks the buffer's arrays {missing}")
    return Batch.from_rows({name: jnp.concatenate([rows[name], online[name]]) for name in online})


def _learn_fns(module, batch_size: int, num_updates: int, mix_ratio: float):
    """Jitted ``learn`` (add the rows, then ``num_updates`` scanned updates) and ``store`` (add only),
    both ``(agents, buffers, data_keys, rows, offline) -> (agents, buffers, metrics)`` over members."""
    import jax
    import jax.numpy as jnp

    from offrl.engine.chunks import vmap_over_seeds
    from offrl.engine.data import sampler
    from offrl.replay import add_rows

    sample = sampler(module)

    def learn(agent, data_key, buffer, rows, offline):
        buffer = add_rows(buffer, rows)

        def body(agent, _):
            batch = mixed_batch(sample, offline, buffer, jax.random.fold_in(data_key, agent.step), batch_size, mix_ratio)
            return module.update(agent, batch)

        agent, metrics = jax.lax.scan(body, agent, None, length=num_updates)
        return agent, (buffer, jax.tree_util.tree_map(jnp.mean, metrics))

    def store(agent, data_key, buffer, rows, offline):
        return agent, (add_rows(buffer, rows), {})

    def compiled(fn):
        members = vmap_over_seeds(fn)

        def call(agents, buffers, data_keys, rows, offline):
            agents, (buffers, metrics) = members(agents, (data_keys, buffers, rows), (offline,))
            return agents, buffers, metrics

        return jax.jit(call, donate_argnums=(1,))  # the buffers are rewritten in place

    return compiled(learn), compiled(store)


class OnlineLearner:
    """``members`` agents (seed-stacked) learning online in ``env`` (one env per member).

    choose(agents, obs, env_step) -> (agent-space actions, env actions, logged): the action rule.
    observe(transition, agent_actions, logged, env_step): optional, sees every env step (a behaviour
        learner keeps the full history for its replay file there).
    example_row: one buffer row (:func:`transition_row`, or a row of the offline data); every key beyond
        the five transition fields and :data:`SUCCESSOR_ROW` must have a fill value in the spec's
        ``online_extras_fill``.
    offline / mix_ratio: the shared offline arrays and their exact share of every minibatch.
    to_agent_obs / scale_rewards: env units -> the agent's (observation normalisation, reward scaling).
    step_offset / folder: name steps and the last good checkpoint in a divergence message.
    """

    def __init__(self, module, agents, data_keys, env, *, choose: Callable, example_row: Mapping[str, Any],
                 capacity: int, batch_size: int, update_every: int, updates_per_step: int = 1, start_steps: int = 0,
                 mix_ratio: float = 0.0, offline=None, config=None, seed: int = 0, observe: Callable | None = None,
                 to_agent_obs: Callable = lambda o: o, scale_rewards: Callable = lambda r: r, step_offset: int = 0,
                 folder=None):
        import jax
        import jax.numpy as jnp

        from offrl.algos import algorithm_spec
        from offrl.replay import init_buffer
        from offrl.rollout import OnlineRollout

        spec = algorithm_spec(module)
        self.fill = dict(spec.online_extras_fill)
        missing = sorted(k for k in example_row if k not in TRANSITION_ROW + SUCCESSOR_ROW and k not in self.fill)
        if missing:
            raise ValueError(f"{spec.name}: the replay rows hold {missing}, which online_extras_fill gives no value while an episode is open")
        successor = [k in example_row for k in SUCCESSOR_ROW]
        if any(successor) and not all(successor):
            raise ValueError(f"{spec.name}: the replay rows hold one of {list(SUCCESSOR_ROW)} without the other")
        self.successor = all(successor)
        self._pending: dict[int, int] = {}  # member -> buffer row of the previous chunk still waiting for its next action
        self.online_extras = spec.online_extras
        self.members = int(np.asarray(agents.step).shape[0])
        if env.num_envs != self.members:
            raise ValueError(f"the online learner needs one env per member: {env.num_envs} envs for {self.members} members")
        self.agents, self.data_keys, self.env = agents, data_keys, env
        self.buffers = jax.vmap(lambda _: init_buffer(example_row, capacity))(jnp.arange(self.members))
        self.capacity, self.update_every, self.start_steps = int(capacity), int(update_every), int(start_steps)
        self.offline, self.config, self.choose, self.observe = offline, config, choose, observe
        self.to_agent_obs, self.scale_rewards, self.step_offset, self.folder = to_agent_obs, scale_rewards, step_offset, folder
        self.keys = tuple(example_row)
        self.dtypes = {k: np.asarray(v).dtype for k, v in example_row.items()}
        self._learn, self._store = _learn_fns(module, batch_size, update_every * updates_per_step, mix_ratio)
        self.rollout = OnlineRollout(env, seed=seed)
        self.env_step = 0
        self.episode_returns: list[list[float]] = [[] for _ in range(self.members)]
        self._open: list[list[tuple[int, float]]] = [[] for _ in range(self.members)]  # (buffer row, scaled reward)
        self._closed: list[tuple[int, list, bool]] = []

    def chunk(self, env_steps: int | None = None) -> dict[str, np.ndarray]:
        """``update_every`` env steps, then one jitted call; returns the chunk's mean metrics per member
        (``{name: (members,)}``, empty while no update ran). A shorter chunk (``env_steps <
        update_every``, the end of a run) stores its rows without updating."""
        import jax
        import jax.numpy as jnp

        from offrl.engine.training import check_finite

        rows = {k: [] for k in self.keys}
        first_row = int(np.asarray(self.buffers.ptr).reshape(-1)[0])
        count = self.update_every if env_steps is None else int(env_steps)
        waiting: dict[int, int] = {}  # member -> step (in this chunk) of the row waiting for its next action
        for t in range(count):
            step = self.env_step + t
            agent_actions, env_actions, logged = self.choose(self.agents, self.rollout.obs, step)
            transition = self.rollout.step(env_actions)
            if self.observe is not None:
                self.observe(transition, agent_actions, logged, step)
            rewards = self.scale_rewards(transition["rewards"])
            actions = np.asarray(agent_actions).reshape(self.members, *self.buffers.data["actions"].shape[2:])
            rows["observations"].append(self.to_agent_obs(transition["observations"]))
            rows["actions"].append(actions)
            if self.successor:
                self._link_successors(rows, waiting, actions, transition, t)
            rows["rewards"].append(rewards)
            rows["next_observations"].append(self.to_agent_obs(transition["next_observations"]))
            rows["masks"].append(1.0 - np.asarray(transition["terminals"], np.float32))
            for key, value in self.fill.items():
                rows[key].append(np.full(self.members, value, np.float32))
            for i, ret, _ in self.rollout.finished:
                self.episode_returns[i].append(ret)
            self.rollout.finished.clear()
            if self.online_extras is not None:
                done = np.asarray(transition["terminals"]) | np.asarray(transition["timeouts"])
                for i in range(self.members):
                    self._open[i].append(((first_row + t) % self.capacity, float(rewards[i])))
                    if done[i]:
                        self._closed.append((i, self._open[i], bool(transition["terminals"][i])))
                        self._open[i] = []
        new_rows = {k: jnp.asarray(np.stack(v, axis=1), self.dtypes[k]) for k, v in rows.items()}
        self._pending = {i: (first_row + t) % self.capacity for i, t in waiting.items()}
        self.env_step += count
        fn = self._learn if self.env_step >= self.start_steps and count == self.update_every else self._store
        self.agents, self.buffers, metrics = fn(self.agents, self.buffers, self.data_keys, new_rows, self.offline)
        self._write_extras()
        if not metrics:
            return {}
        metrics = {k: np.asarray(v) for k, v in jax.device_get(metrics).items()}
        check_finite({k: v[:, None] for k, v in metrics.items()}, self.step_offset + self.env_step - 1, folder=self.folder)
        return metrics

    def restart(self, seeds) -> None:
        """Start new episodes in every env (reset with ``seeds``); the open ones end as cut (a timeout)."""
        self._closed.extend((i, self._open[i], False) for i in range(self.members) if self._open[i])
        self._open = [[] for _ in range(self.members)]
        self._pending = {}
        self._write_extras()
        self.rollout.reset_all(list(seeds))

    def take_episode_returns(self) -> list[list[float]]:
        """The returns of the episodes finished since the last call, per member."""
        out, self.episode_returns = self.episode_returns, [[] for _ in range(self.members)]
        return out

    def _link_successors(self, rows: dict, waiting: dict, actions: np.ndarray, transition: dict, t: int) -> None:
        """The successor rule: ``actions`` (step ``t``'s) become the next action of each member's
        previous row when its episode went on; step ``t``'s row holds its own action, known 0, and
        waits for step ``t + 1`` unless its episode ended."""
        import jax.numpy as jnp

        rows["next_actions"].append(actions.copy())
        rows["next_action_known"].append(np.zeros(self.members, np.float32))
        if t == 0 and self._pending:
            data = dict(self.buffers.data)
            members = np.array(sorted(self._pending))
            buffer_rows = np.array([self._pending[i] for i in members])
            data["next_actions"] = data["next_actions"].at[members, buffer_rows].set(
                jnp.asarray(actions[members], data["next_actions"].dtype))
            data["next_action_known"] = data["next_action_known"].at[members, buffer_rows].set(1.0)
            self.buffers = self.buffers.replace(data=data)
            self._pending = {}
        for i, previous in waiting.items():
            rows["next_actions"][previous][i] = actions[i]
            rows["next_action_known"][previous][i] = 1.0
        waiting.clear()
        done = np.asarray(transition["terminals"]) | np.asarray(transition["timeouts"])
        waiting.update({i: t for i in range(self.members) if not done[i]})

    def _write_extras(self) -> None:
        """Write each finished episode's ``online_extras`` (e.g. its Monte-Carlo returns) over its rows."""
        if not self._closed:
            return
        data = dict(self.buffers.data)
        for i, rows_rewards, terminal in self._closed:
            idx = np.array([p[0] for p in rows_rewards])
            for key, values in self.online_extras(np.array([p[1] for p in rows_rewards]), terminal, self.config).items():
                data[key] = data[key].at[i, idx].set(values)
        self.buffers = self.buffers.replace(data=data)
        self._closed.clear()


# ---------------------------------------------------------------------- offline -> online optimiser state
