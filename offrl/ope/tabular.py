"""Finite MDPs with known dynamics: exact policy values to test off-policy estimators against.

A :class:`TabularMDP` has ``S`` states, ``A`` actions, transition probabilities
``P[s, a, s']``, mean rewards ``R[s, a]`` (the logged reward is ``R[s, a]`` plus optional
Gaussian noise), a start distribution ``mu0[s]`` and a set of absorbing *terminal* states:
entering one ends the episode (``terminals = True``) and is worth nothing afterwards.

Exact values solve the Bellman equations for a policy ``pi[s, a]``:

* discounted, infinite horizon (``horizon=None``)::

      Q = R + gamma * P (m * V),   V(s) = sum_a pi(a|s) Q(s, a),   m(s') = 1 - terminal(s')

  i.e. ``V = (I - gamma * P_pi M)^{-1} R_pi``, one linear solve;
* finite horizon ``H`` (discounted or, with ``gamma = 1``, undiscounted), by backward
  induction from ``V_H = 0``: ``Q_t = R + gamma * P (m * V_{t+1})``; ``Q`` then has a leading
  time axis ``(H, S, A)`` since the value depends on the steps left.

The value of the policy is ``J(pi) = sum_s mu0(s) V_0(s)``: the expected (discounted) return
of an episode of at most ``H`` steps that starts from ``mu0``. Logged episodes run for ``H``
steps (the last one is a timeout) unless a terminal state ends them first.

Example::

    mdp = random_mdp(np.random.default_rng(0), num_states=5, num_actions=3)
    target = random_policy(np.random.default_rng(1), 5, 3)
    behavior = mix_policies(target, uniform_policy(5, 3), 0.5)    # overlap: half uniform
    truth = policy_value(mdp, target, gamma=1.0, horizon=10)
    data = sample_dataset(mdp, behavior, num_episodes=1000, horizon=10, rng=np.random.default_rng(2))
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class TabularMDP:
    """``P[s, a, s']``, ``R[s, a]``, ``mu0[s]``, ``terminal[s]`` (see the module docstring)."""

    transitions: np.ndarray
    rewards: np.ndarray
    initial: np.ndarray
    terminal: np.ndarray
    reward_noise: float = 0.0

    @property
    def num_states(self) -> int:
        return int(self.rewards.shape[0])

    @property
    def num_actions(self) -> int:
        return int(self.rewards.shape[1])


def random_mdp(rng: np.random.Generator, num_states: int = 6, num_actions: int = 3, num_terminal: int = 0,
               branching: float = 1.0, reward_noise: float = 0.0) -> TabularMDP:
    """A random MDP: ``P[s, a] ~ Dirichlet(branching)``, ``R ~ U[0, 1]``, ``mu0`` over the
    non-terminal states ~ Dirichlet(1); the last ``num_terminal`` states are absorbing terminals
    (no start mass there)."""
    if not 0 <= num_terminal < num_states:
        raise ValueError(f"num_terminal={num_terminal} must be in [0, num_states={num_states}).")
    transitions = rng.dirichlet(np.full(num_states, branching), size=(num_states, num_actions))
    rewards = rng.uniform(0.0, 1.0, size=(num_states, num_actions))
    terminal = np.zeros(num_states, dtype=bool)
    if num_terminal:
        terminal[-num_terminal:] = True
    initial = np.zeros(num_states)
    initial[~terminal] = rng.dirichlet(np.ones(num_states - num_terminal))
    return TabularMDP(transitions, rewards, initial, terminal, float(reward_noise))


# ---------------------------------------------------------------------- policies
def uniform_policy(num_states: int, num_actions: int) -> np.ndarray:
    return np.full((num_states, num_actions), 1.0 / num_actions)


def random_policy(rng: np.random.Generator, num_states: int, num_actions: int, concentration: float = 1.0) -> np.ndarray:
    """``pi(.|s) ~ Dirichlet(concentration)`` per state: small concentration -> near-deterministic."""
    return rng.dirichlet(np.full(num_actions, concentration), size=num_states)


def greedy_policy(q: np.ndarray) -> np.ndarray:
    """The deterministic policy ``pi(a|s) = 1[a = argmax_a q(s, a)]`` as a ``(S, A)`` table."""
    return np.eye(q.shape[-1])[np.argmax(q, axis=-1)]


def mix_policies(first: np.ndarray, second: np.ndarray, weight_second: float) -> np.ndarray:
    """``(1 - w) * first + w * second``: the overlap knob. A behaviour policy that mixes the
    target with the uniform policy has ``pi_e / pi_b <= 1 / (1 - w + w / A)`` per step."""
    return (1.0 - weight_second) * first + weight_second * second


# ---------------------------------------------------------------------- exact values
def q_values(mdp: TabularMDP, policy: np.ndarray, gamma: float, horizon: int | None = None) -> np.ndarray:
    """Exact ``Q^pi``: ``(S, A)`` for ``horizon=None`` (discounted, needs ``gamma < 1``), else
    ``(H, S, A)`` with ``Q[t]`` the value with ``H - t`` steps left."""
    alive = (~mdp.terminal).astype(float)
    if horizon is None:
        if not gamma < 1.0:
            raise ValueError("an infinite-horizon value needs gamma < 1; pass a finite horizon for gamma = 1.")
        s, a = mdp.rewards.shape
        m = np.einsum("sax,x,xb->saxb", mdp.transitions, alive, policy).reshape(s * a, s * a)  # (s, a) -> (s', a')
        q = np.linalg.solve(np.eye(s * a) - gamma * m, mdp.rewards.reshape(-1))
        return q.reshape(s, a)
    q = np.zeros((horizon, *mdp.rewards.shape))
    v_next = np.zeros(mdp.num_states)
    for t in range(horizon - 1, -1, -1):
        q[t] = mdp.rewards + gamma * mdp.transitions @ (alive * v_next)
        v_next = (policy * q[t]).sum(-1)
    return q


def state_values(mdp: TabularMDP, policy: np.ndarray, gamma: float, horizon: int | None = None) -> np.ndarray:
    """``V^pi(s) = sum_a pi(a|s) Q^pi(s, a)``: ``(S,)`` or ``(H, S)``."""
    return (policy * q_values(mdp, policy, gamma, horizon)).sum(-1)


def policy_value(mdp: TabularMDP, policy: np.ndarray, gamma: float, horizon: int | None = None) -> float:
    """``J(pi) = sum_s mu0(s) V^pi_0(s)``, the exact expected (discounted) episode return."""
    v = state_values(mdp, policy, gamma, horizon)
    return float(mdp.initial @ (v if horizon is None else v[0]))


# ---------------------------------------------------------------------- logging episodes
def sample_episodes(mdp: TabularMDP, policy: np.ndarray, num_episodes: int, horizon: int,
                    rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Roll ``num_episodes`` episodes of at most ``horizon`` steps, all episodes at once.

    Returns flat arrays in dataset order (episode after episode): ``states``,
    ``actions``, ``rewards``, ``next_states`` (int / float), ``terminals``, ``timeouts`` and
    ``action_log_probs = log pi(a|s)`` of the logging policy.
    """
    n, s_count = num_episodes, mdp.num_states
    cum_p = np.cumsum(mdp.transitions, axis=-1)
    cum_pi = np.cumsum(policy, axis=-1)
    state = rng.choice(s_count, size=n, p=mdp.initial)
    alive = np.ones(n, dtype=bool)
    cols = {k: np.zeros((n, horizon), dtype=d) for k, d in
            (("states", int), ("actions", int), ("rewards", float), ("next_states", int),
             ("terminals", bool), ("timeouts", bool), ("valid", bool))}
    for t in range(horizon):
        action = _draw(cum_pi[state], rng)
        nxt = _draw(cum_p[state, action], rng)
        reward = mdp.rewards[state, action] + mdp.reward_noise * rng.standard_normal(n)
        term = mdp.terminal[nxt]
        for key, value in (("states", state), ("actions", action), ("rewards", reward), ("next_states", nxt),
                           ("terminals", term), ("timeouts", ~term & (t == horizon - 1)), ("valid", alive)):
            cols[key][:, t] = value
        alive = alive & ~term
        state = nxt
    valid = cols.pop("valid")
    out = {k: v[valid] for k, v in cols.items()}  # row-major: episode after episode
    out["action_log_probs"] = np.log(policy[out["states"], out["actions"]])
    return out


def _draw(cumulative: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    u = rng.uniform(size=cumulative.shape[:-1] + (1,))
    return np.minimum((u > cumulative).sum(-1), cumulative.shape[-1] - 1)


def sample_dataset(mdp: TabularMDP, policy: np.ndarray, num_episodes: int, horizon: int,
                   rng: np.random.Generator, observation: str = "onehot"):
    """:func:`sample_episodes` as an :class:`offrl.data.Dataset`: observations one-hot
    ``(N, S)`` or the state index ``(N, 1)`` (``observation="index"``), actions the action
    index as a ``(N, 1)`` float column, ``infos["action_log_probs"]`` the logging policy's."""
    from offrl.data.dataset import Dataset

    ep = sample_episodes(mdp, policy, num_episodes, horizon, rng)
    encode = (lambda s: np.eye(mdp.num_states, dtype=np.float32)[s]) if observation == "onehot" else \
        (lambda s: s[:, None].astype(np.float32))
    if observation not in ("onehot", "index"):
        raise ValueError(f"observation={observation!r}; use 'onehot' or 'index'.")
    return Dataset.from_arrays(
        observations=encode(ep["states"]), actions=ep["actions"][:, None].astype(np.float32),
        rewards=ep["rewards"].astype(np.float32), terminals=ep["terminals"], timeouts=ep["timeouts"],
        next_observations=encode(ep["next_states"]),
        infos={"action_log_probs": ep["action_log_probs"].astype(np.float32)},
        metadata={"generator": "offrl.ope.tabular", "num_states": mdp.num_states,
                  "num_actions": mdp.num_actions, "horizon": horizon, "observation": observation},
        source="<tabular mdp>")


def state_index(observations: np.ndarray) -> np.ndarray:
    """The state index of one-hot ``(N, S)`` or index ``(N, 1)`` observations."""
    obs = np.asarray(observations)
    return obs[:, 0].astype(int) if obs.shape[1] == 1 else np.argmax(obs, axis=1)
