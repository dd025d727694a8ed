"""``EnsembleCritic(broadcast_inputs=True)`` is a layout choice: same parameters, same values."""

import jax
import jax.numpy as jnp
import numpy as np

from offrl.nets import EnsembleCritic


def test_broadcast_inputs_keep_the_parameters_values_and_gradients():
    shared = EnsembleCritic((32, 32), num_qs=3)
    broadcast = EnsembleCritic((32, 32), num_qs=3, broadcast_inputs=True)
    k_obs, k_act, k_init = jax.random.split(jax.random.PRNGKey(0), 3)
    obs, act = jax.random.normal(k_obs, (40, 5)), jax.random.uniform(k_act, (40, 2), minval=-1, maxval=1)
    params = shared.init(k_init, obs[:1], act[:1])
    params_b = broadcast.init(k_init, obs[:1], act[:1])
    # the same tree and the same initial values: checkpoints of either layout load into the other
    assert jax.tree_util.tree_structure(params) == jax.tree_util.tree_structure(params_b)
    for a, b in zip(jax.tree_util.tree_leaves(params), jax.tree_util.tree_leaves(params_b)):
        np.testing.assert_array_equal(a, b)
    # members differ from each other (the vmap splits the init key), so a mix-up of members would show
    assert not np.allclose(params["params"]["VmapCritic_0"]["MLP_0"]["Dense_0"]["kernel"][0],
                           params["params"]["VmapCritic_0"]["MLP_0"]["Dense_0"]["kernel"][1])
    q, q_b = shared.apply(params, obs, act), broadcast.apply(params, obs, act)
    assert q.shape == q_b.shape == (3, 40)
    np.testing.assert_allclose(q_b, q, rtol=1e-5, atol=1e-6)

    def loss(p, net):
        return jnp.sum(net.apply(p, obs, act) ** 2)

    g, g_b = jax.grad(loss)(params, shared), jax.grad(loss)(params, broadcast)
    for a, b in zip(jax.tree_util.tree_leaves(g), jax.tree_util.tree_leaves(g_b)):
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-5)
    # the gradient with respect to the actions (an actor's loss) is summed over members in both
    ga = jax.grad(lambda a: jnp.sum(shared.apply(params, obs, a).min(0)))(act)
    ga_b = jax.grad(lambda a: jnp.sum(broadcast.apply(params, obs, a).min(0)))(act)
    np.testing.assert_allclose(ga_b, ga, rtol=1e-4, atol=1e-6)
