"""EDAC: SAC-N plus the gradient-diversity term (its numbers are tested in test_sac_n.py); here the
variant's defaults, that training with the term lowers the critics' gradient similarity, and a real run."""

import jax
import numpy as np
import pytest

from offrl import data as offrl_data
from offrl import engine
from offrl.algos import edac, sac_n
from offrl.algos.common import apply_overrides
from offrl.errors import ConfigError

from _pendulum import pendulum_medium


def test_edac_is_sac_n_with_the_paper_defaults():
    assert edac.update is sac_n.update and edac.critic_loss is sac_n.critic_loss
    config = edac.Config()
    assert (config.diversity_weight, config.num_qs, config.batch_size) == (1.0, 10, 256)
    with pytest.raises(ConfigError, match="'num_qs'") as info:
        apply_overrides(config, {"num_qs": "1"})
    assert "\n" not in str(info.value)


def _trained_similarity(module, config, arrays, info, steps=300):
    agents, keys = engine.create_agents(module, config, info.obs_dim, info.action_dim, seed=0, seeds=1)
    agents, metrics = engine.Trainer(module, config.batch_size, seeds=1).run(agents, keys, arrays, steps)
    agent = jax.tree_util.tree_map(lambda x: x[0], agents)
    obs, actions = arrays["observations"][:1000], arrays["actions"][:1000]
    grads = sac_n.critic_action_gradients(agent.critic.params, obs, actions, config.hidden_dims, config.num_qs)
    return float(sac_n.ensemble_gradient_diversity(grads)), metrics


def test_training_with_the_diversity_term_spreads_the_critics_gradients_apart():
    """On the bundled Hopper data (3-D actions: with one action dimension every cosine is +-1 and
    the term has no gradient)."""
    overrides = {"hidden_dims": "32,32", "num_qs": "4"}
    edac_config = apply_overrides(edac.Config(), overrides)
    arrays, info = engine.prepare_data(offrl_data.load("hopper-medium-20k-v0"), edac_config, None, edac)
    with_term, metrics = _trained_similarity(edac, edac_config, arrays, info)
    without_term, _ = _trained_similarity(sac_n, apply_overrides(sac_n.Config(), overrides), arrays, info)
    assert with_term < without_term, (with_term, without_term)
    assert np.isfinite(np.asarray(metrics["diversity_loss"])).all()


@pytest.mark.slow
def test_edac_beats_a_random_policy_on_wide_coverage_pendulum_data():
    run = engine.train("edac", pendulum_medium(), steps=3000, eval_every=3000, log_every=1000, eval_episodes=5,
                       progress=False, config_overrides={"hidden_dims": "64,64", "num_qs": "5"})
    score = float(np.mean(run.final_scores))
    assert score > 30, f"EDAC reached only {score:.1f} (random = 0, controller = 100)"
