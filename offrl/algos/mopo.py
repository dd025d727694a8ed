"""Model-based Offline Policy Optimization, MOPO (Yu, Thomas, Yu, Ermon, Zou, Levine, Finn & Ma
2020, "MOPO: Model-based Offline Policy Optimization").

SAC trained on real and model transitions (:mod:`offrl.algos.model_based`), the model's rewards
penalised by the ensemble's uncertainty, which bounds the model's error in the return::

    r~(s, a) = r^(s, a) - lambda * u(s, a),    u(s, a) = max_i ||sigma_i(s, a)||_2      (eq. 7)

over the ensemble members ``i`` (:func:`offrl.dynamics.mopo_uncertainty`; ``sigma_i`` is the
predicted standard deviation of ``(s' - s, r)`` in the data's units). Real rows keep their rewards.
The critic's target is SAC's soft one, ``y = r~ + gamma * mask * (min_k Q'_k(s', a') - alpha log pi(a'|s'))``.

D4RL settings of the authors' code (``rollout_length`` h, ``penalty_coef`` lambda):
hopper-medium 5, 5.0; hopper-medium-replay 5, 1.0; hopper-medium-expert 5, 1.0;
halfcheetah-medium 1, 1.0; OfflineRL-Kit's walker2d-medium-v2 run: 5, 0.5. Batches are 5% real
(``real_ratio`` 0.05); rollouts of 50,000 starts every 1,000 updates, the buffer keeping five.

One default departs from the authors': the critics have LayerNorm (``critic_layer_norm``). Without
it, on the bundled Pendulum data (rewards in [-14.7, 0], so every true Q is below 0; tau = 0.05,
10k updates) the two critics drift upward past the reward bound, Q(s, a) reaching +500 on the
buffer's own rows, and the uncertainty penalty cannot stop it: with lambda = 1 or 10 (u is about
0.2 against rewards of -5) or half the batch real the drift is the same, and a 10-critic minimum
slows it but the policy still scores below a random one. With LayerNorm, Q settles at the data's
scale (its mean over the data's (s, a) -253 at 10k updates, the Monte-Carlo returns' -246) and the
policy swings the pendulum up. The target network's Polyak rate sets how fast values propagate,
a time constant of about ``1 / (tau * (1 - gamma))`` updates (20,000 at the authors' tau = 0.005):
short runs raise ``tau`` (the real-run test uses 0.05).

Example::

    run = offrl.train("mopo", "pendulum-medium-replay-v0", steps=20_000,
                      config_overrides={"rollout_starts": 1000, "rollout_every": 100})
"""

from __future__ import annotations

from dataclasses import dataclass

import jax

from offrl.algos import model_based, sac
from offrl.algos.common import Batch
from offrl.algos.contract import AlgorithmSpec
from offrl.algos.model_based import Agent, act, config_for_dataset, create, q_value, sample
from offrl.algos.ranges import BOOL, NON_NEGATIVE, param
from offrl.dynamics import mopo_uncertainty

__all__ = ["Config", "Agent", "create", "update", "act", "q_value", "penalised_rewards", "SPEC"]


@dataclass(frozen=True)
class Config(model_based.ModelBasedConfig):
    """MOPO hyperparameters: the model-based fields (:class:`offrl.algos.model_based.ModelBasedConfig`)
    and the penalty's weight."""

    penalty_coef: float = param(1.0, NON_NEGATIVE)  #: lambda of r - lambda * u(s, a) (authors' code: 1.0, hopper-medium 5.0)
    critic_layer_norm: bool = param(True, BOOL)  #: LayerNorm in the critics (not the authors': see the module docstring)


def penalised_rewards(rewards: jax.Array, std: jax.Array, penalty_coef: float) -> jax.Array:
    """``r - lambda * max_i ||sigma_i||_2`` for predicted standard deviations ``std`` of shape ``(M, N, D)``."""
    return rewards - penalty_coef * mopo_uncertainty(std)


def update(agent: Agent, batch: Batch) -> tuple[Agent, dict[str, jax.Array]]:
    agent, mixed, model_metrics = model_based.model_batch(agent, batch, reward_penalty=agent.config.penalty_coef)
    rng, target_key, actor_key = jax.random.split(agent.rng, 3)
    agent = agent.replace(rng=rng)
    target = sac.soft_target(agent, mixed, target_key)
    agent, metrics = model_based.sac_update(agent, mixed, target, actor_key)
    return agent, {**metrics, **model_metrics}


SPEC = AlgorithmSpec(name="mopo", config_for_dataset=config_for_dataset, sample=sample)
