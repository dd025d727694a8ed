"""The behaviour policy's log-probabilities ``log pi_b(a_i|s_i)`` of the logged actions.

``logged``: the dataset's ``infos/action_log_probs`` (offrl's collected tiers record them).
``estimated``: fitted to the data by behaviour cloning, and every report says so:

* continuous actions: a diagonal Gaussian ``N(mu(s), diag(sigma(s)^2))`` (an MLP with a
  state-dependent std, :class:`offrl.nets.GaussianActor` without squashing) fitted by maximum
  likelihood on actions rescaled to ``[-1, 1]`` by the data's per-dimension range; the density
  is returned in env units, ``log N(a_scaled) - sum_d log(half_range_d)``;
* discrete actions: the empirical frequencies ``N(s, a) / N(s)`` over identical observation
  rows (exact for tabular data, meaningless for continuous observations).

An estimated behaviour policy fitted on the same data it scores is optimistic about the logged
actions, which shrinks the weights of off-data actions: treat such estimates as approximate.
``auto`` uses the logged ones when present.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from offrl.config import ANY_INT, LEARNING_RATE, POSITIVE_INT, WIDTHS, param
from offrl.errors import OffrlError

BEHAVIOR_MODES = ("auto", "logged", "estimated")


@dataclass(frozen=True)
class BehaviorConfig:
    """Behaviour-cloning settings for an estimated behaviour policy.

    hidden_dims: MLP trunk of the Gaussian.
    steps: behaviour-cloning gradient steps (minibatches).
    batch_size: minibatch size.
    learning_rate: Adam learning rate.
    seed: seed of the initialisation and the minibatches.
    """

    COMMAND_FLAGS: ClassVar[bool] = True

    hidden_dims: tuple[int, ...] = param((256, 256), WIDTHS, flag=False)
    steps: int = param(5000, POSITIVE_INT, flag="--bc-steps")
    batch_size: int = param(256, POSITIVE_INT, flag="--bc-batch-size")
    learning_rate: float = param(3e-4, LEARNING_RATE, flag="--bc-learning-rate")
    seed: int = param(0, ANY_INT, flag=False)


def behavior_log_probs(dataset, mode: str = "auto", discrete: bool = False,
                       config: BehaviorConfig = BehaviorConfig()) -> tuple[np.ndarray, bool]:
    """``(log_probs, estimated)`` for every transition of ``dataset``."""
    if mode not in BEHAVIOR_MODES:
        raise OffrlError(f"--behavior {mode!r} is not a choice; use one of {', '.join(BEHAVIOR_MODES)}.")
    logged = dataset.infos.get("action_log_probs")
    if mode == "logged" or (mode == "auto" and logged is not None):
        if logged is None:
            raise OffrlError(f"dataset {dataset.source} has no infos/action_log_probs, so --behavior logged cannot be used; "
                             "pass --behavior estimated to fit the behaviour policy by behaviour cloning.")
        return np.asarray(logged, np.float64).reshape(len(dataset)), False
    if discrete:
        return empirical_log_probs(dataset.observations, dataset.actions), True
    return fit_gaussian_behavior(dataset.observations, dataset.actions, config), True


def empirical_log_probs(observations: np.ndarray, actions: np.ndarray) -> np.ndarray:
    """``log N(s, a) / N(s)`` with ``s`` the distinct observation rows, ``a`` the action index."""
    _, state = np.unique(np.asarray(observations), axis=0, return_inverse=True)
    action = np.asarray(actions).reshape(len(actions), -1)[:, 0].astype(int)
    state = state.reshape(-1)
    pair = state * (action.max() + 1) + action
    pair_counts = np.bincount(pair)[pair]
    state_counts = np.bincount(state)[state]
    return np.log(pair_counts / state_counts)


def fit_gaussian_behavior(observations: np.ndarray, actions: np.ndarray, config: BehaviorConfig = BehaviorConfig()) -> np.ndarray:
    """Fit the Gaussian of the module docstring; returns env-unit log-densities of ``actions``."""
    import jax
    import jax.numpy as jnp
    import optax

    from offrl.nets import GaussianActor, gaussian_log_prob

    obs = np.asarray(observations, np.float32)
    act = np.asarray(actions, np.float32)
    obs_mean, obs_std = obs.mean(0), obs.std(0) + 1e-3
    low, high = act.min(0), act.max(0)
    center, half = (high + low) / 2, np.maximum((high - low) / 2, 1e-6)
    x = jnp.asarray((obs - obs_mean) / obs_std)
    y = jnp.asarray((act - center) / half)
    net = GaussianActor(act.shape[1], tuple(config.hidden_dims), tanh_squash=False, state_dependent_std=True)
    key = jax.random.PRNGKey(config.seed)
    params = net.init(key, x[:1])
    optimizer = optax.adam(config.learning_rate)

    def loss_fn(p, xb, yb):
        mean, log_std = net.apply(p, xb)
        return -gaussian_log_prob(mean, log_std, yb).mean()

    def step(carry, k):
        p, opt_state = carry
        idx = jax.random.randint(k, (config.batch_size,), 0, x.shape[0])
        loss, grads = jax.value_and_grad(loss_fn)(p, x[idx], y[idx])
        updates, opt_state = optimizer.update(grads, opt_state, p)
        return (optax.apply_updates(p, updates), opt_state), loss

    @jax.jit
    def train(p, k):
        (p, _), losses = jax.lax.scan(step, (p, optimizer.init(p)), jax.random.split(k, config.steps))
        return p, losses

    params, _ = train(params, jax.random.fold_in(key, 1))
    apply = jax.jit(lambda p, xb, yb: gaussian_log_prob(*net.apply(p, xb), yb))
    out = np.concatenate([np.asarray(apply(params, x[i:i + 65536], y[i:i + 65536])) for i in range(0, len(obs), 65536)])
    return out.astype(np.float64) - float(np.log(half).sum())
