"""Cal-QL: the bound by hand, the critic loss with the bound, the Monte-Carlo returns seam, and
CQL's penalty-weight decay."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax.training.train_state import TrainState

from offrl.algos import cal_ql, cql, get_algorithm
from offrl.algos.common import Batch
from offrl.data import Dataset
from offrl.engine import prepare_data

SMALL = cal_ql.Config(hidden_dims=(8,), num_qs=1, cql_alpha=5.0, n_actions=1, bc_warmup_steps=10)


def test_bound_replaces_only_policy_values_below_the_reference():
    # K=1 critic, B=2 states, M=3 actions: 1 uniform then 2 policy actions.
    q_ood = jnp.array([[[-5.0, -3.0, 2.0], [0.0, 4.0, -1.0]]])
    bounded = cal_ql.calibrate(q_ood, jnp.array([1.0, 3.0]), n_uniform=1)
    # state 0: bound 1 -> policy values -3 -> 1, 2 stays; the uniform -5 is untouched.
    # state 1: bound 3 -> 4 stays, -1 -> 3; the uniform 0 is untouched.
    np.testing.assert_array_equal(np.asarray(bounded), [[[-5.0, 1.0, 2.0], [0.0, 4.0, 3.0]]])


def _linear_agent(config, slope):
    def apply_fn(params, obs, actions):
        return slope * jnp.sum(actions, axis=-1)[None, :]

    agent = jax.jit(cql.create, static_argnums=(0, 1, 2))(config, 1, 1, jax.random.PRNGKey(0))
    return agent.replace(critic=TrainState.create(apply_fn=apply_fn, params={"u": jnp.zeros(())}, tx=optax.sgd(0.0)))


def test_critic_loss_uses_the_bound_where_the_policy_value_is_below_it():
    """Q(s, a) = a; one state, data action 0, target 0; one uniform action -0.5 (log mu = log 0.5)
    and one policy action -0.8 with log-density 0. With V_mu(s) = 0.3 the policy value -0.8 is
    replaced by 0.3: lse = log(exp(-0.5 - log 0.5) + exp(0.3 - 0)); loss = alpha * (lse - 0)."""
    agent = _linear_agent(SMALL, 1.0)
    obs = jnp.zeros((1, 1))
    batch = Batch(obs, jnp.zeros((1, 1)), jnp.zeros(1), obs, jnp.zeros(1), extras={"mc_returns": jnp.array([0.3])})
    ood = jnp.array([[[-0.5], [-0.8]]])
    log_mu = jnp.array([[math.log(0.5), 0.0]])
    loss, aux = jax.jit(cal_ql.critic_loss)(agent.critic.params, agent, batch, jnp.zeros(1), ood, log_mu)
    lse = math.log(math.exp(-0.5 - math.log(0.5)) + math.exp(0.3))
    assert float(loss) == pytest.approx(5.0 * lse, rel=1e-5)
    assert float(aux["calql_bound_rate"]) == 1.0
    # A bound below the policy value changes nothing: plain CQL's number.
    low = batch._replace(extras={"mc_returns": jnp.array([-2.0])})
    loss_low, aux_low = jax.jit(cal_ql.critic_loss)(agent.critic.params, agent, low, jnp.zeros(1), ood, log_mu)
    plain = math.log(math.exp(-0.5 - math.log(0.5)) + math.exp(-0.8))
    assert float(loss_low) == pytest.approx(5.0 * plain, rel=1e-5)
    assert float(aux_low["calql_bound_rate"]) == 0.0


def test_mc_returns_are_returns_to_go_of_scaled_rewards_within_episodes():
    """Two episodes: a terminal one (3 rows) and one cut by a timeout (2 rows)."""
    rewards = np.array([1.0, 2.0, 3.0, 10.0, 20.0], np.float32)
    terminals = np.array([0, 0, 1, 0, 0], bool)
    timeouts = np.array([0, 0, 0, 0, 1], bool)
    obs = np.arange(5, dtype=np.float32)[:, None]
    ds = Dataset.from_arrays(obs, np.zeros((5, 1), np.float32), rewards, terminals, timeouts,
                             next_observations=obs + 1)
    module = get_algorithm("cal_ql")
    config = cal_ql.Config(discount=0.5, reward_scaling="2.0", reward_bias=-1.0)
    data, info = prepare_data(ds, config, None, module)
    scaled = 2.0 * rewards - 1.0                     # [1, 3, 5, 19, 39]
    by_hand = [1 + 0.5 * (3 + 0.5 * 5), 3 + 0.5 * 5, 5, 19 + 0.5 * 39, 39]
    np.testing.assert_allclose(np.asarray(data["mc_returns"]), by_hand, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(data["mc_returns"]),
                               ds.replace(rewards=scaled).returns_to_go(0.5), rtol=1e-6)
    # The default sampler hands the extra array to the algorithm in batch.extras.
    from offrl.engine import sample_transitions

    batch = sample_transitions(data, jax.random.PRNGKey(0), 8)
    assert set(batch.extras) == {"mc_returns"} and batch.extras["mc_returns"].shape == (8,)
    # Plain CQL asks for nothing extra.
    plain, _ = prepare_data(ds, cql.Config(), None, get_algorithm("cql"))
    assert "mc_returns" not in plain


def test_penalty_weight_decays_exponentially_after_the_start_step():
    config = cql.Config(cql_alpha=4.0, cql_alpha_decay=0.01, decay_start_step=100)
    weights = [float(cql.penalty_weight(config, jnp.asarray(t))) for t in (0, 100, 150, 300)]
    assert weights == pytest.approx([4.0, 4.0, 4.0 * math.exp(-0.5), 4.0 * math.exp(-2.0)], rel=1e-6)
    assert float(cql.penalty_weight(cql.Config(cql_alpha=4.0), jnp.asarray(10_000))) == 4.0


# ---------------------------------------------------------------------- CORL's two options
def test_sparse_reward_bound_gives_failed_episodes_the_return_of_failing_forever():
    """A sparse toy: episode A never reaches the goal (reward -1 every step), episode B does
    (reward 0 at its last step). gamma = 0.9, so failing forever is worth -1 / 0.1 = -10."""
    rewards = np.array([-1.0, -1.0, -1.0, -1.0, -1.0, 0.0], np.float32)
    dones = np.array([0, 0, 1, 0, 0, 1], bool)
    plain = cal_ql.monte_carlo_returns(rewards, dones, 0.9, sparse_reward_bound=False)
    sparse = cal_ql.monte_carlo_returns(rewards, dones, 0.9, sparse_reward_bound=True)
    # episode A cut at its end: -1 - 0.9 - 0.81 = -2.71, -1.9, -1; episode B: -1 - 0.9*1 ... by hand
    np.testing.assert_allclose(plain, [-2.71, -1.9, -1.0, -1.9, -1.0, 0.0], rtol=1e-6)
    np.testing.assert_allclose(sparse, [-10.0, -10.0, -10.0, -1.9, -1.0, 0.0], rtol=1e-6)
    # the online hook computes the same for one finished episode
    config = cal_ql.Config(discount=0.9, sparse_reward_bound=True)
    np.testing.assert_allclose(cal_ql.online_extras(rewards[:3], False, config)["mc_returns"], [-10.0] * 3, rtol=1e-6)
    np.testing.assert_allclose(cal_ql.online_extras(rewards[3:], True, config)["mc_returns"], [-1.9, -1.0, 0.0], rtol=1e-6)


def test_sparse_reward_bound_reaches_the_offline_arrays():
    obs = np.zeros((6, 2), np.float32)
    ds = Dataset.from_arrays(obs, np.zeros((6, 1), np.float32), np.array([-1, -1, -1, -1, -1, 0], np.float32),
                             np.array([0, 0, 0, 0, 0, 1], bool), np.array([0, 0, 1, 0, 0, 0], bool), next_observations=obs)
    for bound, expected in ((True, -10.0), (False, -2.71)):
        config = cal_ql.Config(discount=0.9, sparse_reward_bound=bound)
        data, _ = prepare_data(ds, config, None, cal_ql)
        assert float(data["mc_returns"][0]) == pytest.approx(expected, rel=1e-6)


def test_the_bound_is_off_online_unless_calibrated_online():
    from offrl.algos import algorithm_spec
    from offrl.finetuning import FinetuneConfig, _online_config

    spec = algorithm_spec("cal_ql")
    assert spec.online_config is not None
    for keep in (False, True):
        offline = cal_ql.Config(calibrated_online=keep)
        online = _online_config(cal_ql, offline, 100, FinetuneConfig())
        assert offline.calibrated and online.calibrated is keep
