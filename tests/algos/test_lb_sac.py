"""LB-SAC: SAC-N with only its defaults changed (large batch, square-root-scaled learning rates), and a real run."""

import dataclasses
import math

import numpy as np
import pytest

from offrl import engine
from offrl.algos import lb_sac, sac_n

from _pendulum import pendulum_medium


def test_lb_sac_is_sac_n_with_a_large_batch_and_square_root_scaled_learning_rates():
    assert lb_sac.update is sac_n.update and lb_sac.create is sac_n.create
    lb, base = lb_sac.Config(), sac_n.Config()
    differing = {f.name for f in dataclasses.fields(lb) if getattr(lb, f.name) != getattr(base, f.name)}
    assert differing == {"actor_lr", "critic_lr", "entropy_alpha_lr", "batch_size"}
    assert lb.batch_size == 10_000 and lb.num_qs == 10 and lb.diversity_weight == 0.0
    rule = base.actor_lr * math.sqrt(lb.batch_size / base.batch_size)   # 1.875e-3
    for name in ("actor_lr", "critic_lr", "entropy_alpha_lr"):
        assert abs(getattr(lb, name) - rule) / rule < 0.05


@pytest.mark.slow
def test_lb_sac_beats_a_random_policy_on_wide_coverage_pendulum_data():
    run = engine.train("lb_sac", pendulum_medium(), steps=2000, eval_every=2000, log_every=1000, eval_episodes=5,
                       progress=False, config_overrides={"hidden_dims": "64,64", "num_qs": "5", "batch_size": "1024"})
    score = float(np.mean(run.final_scores))
    assert score > 30, f"LB-SAC reached only {score:.1f} (random = 0, controller = 100)"
