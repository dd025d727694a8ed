"""benchmarks/matmul_ceiling.py: the dots of a program, their counts and FLOPs."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from benchmark_script import load

ceiling = load("benchmarks/matmul_ceiling.py", "matmul_ceiling")


def test_dots_are_found_inside_gradients_scans_and_jits_with_their_trip_counts():
    w1, w2 = jnp.ones((5, 5)), jnp.ones((3, 5, 11))

    @jax.jit
    def inner(x):
        return x @ w1                                         # (4, 5) x (5, 5), inside a jit

    def f(x):
        def body(carry, _):
            h = inner(carry)
            return h, jnp.einsum("rh,ehk->erk", h, w2).sum()  # (4, 5) x (3, 5, 11)
        _, ys = jax.lax.scan(body, x, None, length=6)
        return ys.sum()

    forward = ceiling.collect_dots(jax.make_jaxpr(f)(jnp.ones((4, 5))).jaxpr)
    assert sorted(forward.values()) == [6, 6]                 # two dots, six trips each
    both = ceiling.collect_dots(jax.make_jaxpr(jax.grad(f))(jnp.ones((4, 5))).jaxpr)
    # the gradient adds the einsum's and the product's input gradients, again once per trip
    assert len(both) == 4 and set(both.values()) == {6}
    shapes = {(k[0], k[2]) for k in both}
    assert ((4, 5), (5, 5)) in shapes and ((3, 5, 11), (4, 5)) in shapes
    assert sum(ceiling.dot_flops(k[0], k[2], k[4]) * n for k, n in forward.items()) == 6 * (2 * 4 * 5 * 5 + 2 * 3 * 4 * 5 * 11)


def test_dot_flops_counts_batch_contracting_and_free_dimensions():
    dims = (((2,), (1,)), ((0,), (0,)))      # (e, r, h) . (e, h, k) -> (e, r, k)
    assert ceiling.dot_flops((2, 7936, 256), (2, 256, 256), dims) == 2 * 2 * 7936 * 256 * 256
    dims = (((1,), (1,)), ((0,), (0,)))      # (e, r, h) . (e, r, k) -> (e, h, k): a weight gradient
    assert ceiling.dot_flops((2, 100, 30), (2, 100, 40), dims) == 2 * 2 * 100 * 30 * 40


def test_sac_n_and_edac_are_measured_at_ensemble_speeds_sizes():
    """The ceiling of SAC-N/EDAC is compared with ensemble_speed.py's rates: same N, widths and shapes."""
    for name, eta in (("sac_n", 0.0), ("edac", 1.0)):
        _, agent, batch = ceiling.make_agent_and_batch(name)
        assert agent.config.num_qs == 10 and tuple(agent.config.hidden_dims) == (256, 256, 256)
        assert agent.config.diversity_weight == eta and agent.config.batch_size == 256
        assert batch.observations.shape == (256, 11) and batch.actions.shape == (256, 3)
        kernels = [v for k, v in jax.tree_util.tree_leaves_with_path(agent.critic.params) if "kernel" in jax.tree_util.keystr(k)]
        assert kernels[0].shape[0] == 10


def test_the_dynamics_step_is_the_fits_gradient_step_at_model_based_speeds_sizes():
    """The step timed as ``dynamics`` is the fit's: seven 4 x 200 members on 256 rows each, and it lowers the loss."""
    from offrl import dynamics as dyn

    update, state, batch = ceiling.make_dynamics_step()
    x, y, terminals = batch
    assert x.shape == (7, 256, 14) and y.shape == (7, 256, 12) and terminals.shape == (7, 256)
    dots = ceiling.collect_dots(jax.make_jaxpr(update)(state, batch).jaxpr)
    assert sum(n for k, n in dots.items() if k[0] == (7, 256, 200) and k[2] == (7, 200, 200)) == 6  # 3 forward, 3 input-gradient
    net = dyn.init_dynamics(dyn.DynamicsSettings(), 11, 3, jax.random.PRNGKey(0)).net
    loss = lambda params: dyn.model_loss(params, net, x, y, terminals, 2.5e-5)[0]  # noqa: E731
    before = loss(state[0])
    for _ in range(3):
        state = update(state, batch)[0]
    assert loss(state[0]) < before
