"""Agent initialisation: the orthogonal initialiser and the compiled ``create_agents``."""

import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from offrl.algos import get_algorithm
from offrl.engine import chunks
from offrl.nets import orthogonal


@pytest.mark.parametrize("shape", [(3, 256), (256, 256), (256, 1), (4, 2, 5)])
def test_orthogonal_is_jax_s_initialiser_value_for_value(shape):
    key = jax.random.PRNGKey(3)
    ours = orthogonal(1.7)(key, shape)
    theirs = jax.nn.initializers.orthogonal(1.7)(key, shape, jnp.float32)
    np.testing.assert_array_equal(np.asarray(ours), np.asarray(theirs))
    # vmapped (seeds x ensemble members), where the QR runs one matrix at a time
    keys = jax.random.split(key, 6).reshape(2, 3, 2)
    ours = jax.vmap(jax.vmap(lambda k: orthogonal(1.7)(k, shape)))(keys)
    theirs = jax.vmap(jax.vmap(lambda k: jax.nn.initializers.orthogonal(1.7)(k, shape, jnp.float32)))(keys)
    np.testing.assert_array_equal(np.asarray(ours), np.asarray(theirs))
    m = np.asarray(ours[1, 2]).reshape(-1, shape[-1]) / 1.7
    small = min(m.shape)
    gram = m.T @ m if m.shape[0] >= m.shape[1] else m @ m.T
    np.testing.assert_allclose(gram, np.eye(small), atol=1e-5)


def test_a_compiled_vmapped_cql_create_finishes():
    """jaxlib's batched QR used to deadlock a 2-thread CPU pool inside one compiled program (a
    jitted vmap of CQL's create hung on every run); run in a child so a hang fails, not stalls."""
    code = textwrap.dedent("""
        import os
        if hasattr(os, "sched_setaffinity"):      # the 2-thread pool it hung on
            os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:2])
        import jax, numpy as np
        from offrl.algos import get_algorithm
        cql = get_algorithm("cql")
        keys = jax.random.split(jax.random.PRNGKey(0), 3)
        agents = jax.jit(jax.vmap(lambda k: cql.create(cql.Config(), 3, 1, k)))(keys)
        jax.block_until_ready(agents.critic.params)
        print("done")
    """)
    try:
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=90)
    except subprocess.TimeoutExpired:
        pytest.fail("a compiled, vmapped create of CQL did not finish in 90 s (the QR deadlock)")
    assert result.returncode == 0 and "done" in result.stdout, result.stderr[-2000:]


@pytest.mark.parametrize("name", ["td3_bc", "iql", "cql", "sac_n"])
def test_create_agents_is_strongly_typed_and_keeps_its_static_parts(name):
    module = get_algorithm(name)
    config = module.Config()
    a, keys_a = chunks.create_agents(module, config, 3, 1, seed=0, seeds=2)
    b, _ = chunks.create_agents(module, config, 3, 1, seed=1, seeds=2)
    # the same optimisers and apply functions: one training-chunk program serves both
    assert jax.tree_util.tree_structure(a) == jax.tree_util.tree_structure(b)
    assert not any(getattr(x, "weak_type", False) for x in jax.tree_util.tree_leaves(a))
    # the seeds differ, and a seed's draw is what the op-by-op vmap gives (to float rounding, ~4e-6 after the QR)
    leaves_a, leaves_b = jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)
    assert any(not np.array_equal(x, y) for x, y in zip(leaves_a, leaves_b))
    keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.PRNGKey(0), i))(np.arange(2))
    init_keys = jax.vmap(lambda k: jax.random.split(k, 2))(keys).swapaxes(0, 1)[0]
    eager = jax.vmap(lambda k: module.create(config, 3, 1, k))(init_keys)
    for x, y in zip(leaves_a, jax.tree_util.tree_leaves(eager)):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=0, atol=2e-5)
