"""Seeds in one program: a ``lax.map`` over them (the CPU default) equals ``vmap`` over them."""

import jax
import numpy as np
import pytest
from conftest import TINY

from offrl import engine
from offrl.algos import get_algorithm
from offrl.algos.common import apply_overrides
from offrl.engine.chunks import member_loop_default


@pytest.mark.parametrize("algo", ["iql", "td3_bc"])  # td3_bc: the delayed actor step is a lax.cond on the step
def test_map_over_seeds_equals_vmap(pendulum_small, algo):
    module = get_algorithm(algo)
    config = apply_overrides(module.Config(), TINY)
    data, info = engine.prepare_data(pendulum_small, config)
    agents, keys = engine.create_agents(module, config, info.obs_dim, info.action_dim, seed=0, seeds=3)
    out = {}
    for members in ("map", "vmap"):
        trainer = engine.Trainer(module, config.batch_size, 3, members=members)
        a, m = trainer.run(agents, keys, data, 5)
        a, m = trainer.run(a, keys, data, 5)
        out[members] = (a, m)
    assert int(np.asarray(out["map"][0].step)[0]) == 10 and np.asarray(out["map"][0].step).shape == (3,)
    for x, y in zip(*(jax.tree_util.tree_leaves(out[k]) for k in ("map", "vmap"))):
        assert x.shape == y.shape
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-5, atol=1e-6)
    biggest = max(jax.tree_util.tree_leaves(out["map"][0]), key=lambda x: x.size)
    assert not np.allclose(np.asarray(biggest[0]), np.asarray(biggest[1]))  # the seeds differ


def test_cpu_loops_over_seeds_by_default():
    assert jax.default_backend() == "cpu"
    assert member_loop_default(jax.numpy.zeros((3, 2), jax.numpy.uint32))
    with pytest.raises(ValueError, match="members must be"):
        engine.Trainer(get_algorithm("iql"), 8, 3, members="pmap")
