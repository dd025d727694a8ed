"""``run_if``: a branch on the step that updates the agent in place (a zero-or-one-trip loop)."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import TINY

from offrl import engine
from offrl.algos import get_algorithm
from offrl.algos.common import apply_overrides, run_if


def _bump(c):
    return {"w": c["w"] * 2.0 + 1.0, "n": c["n"] + 1}


@pytest.mark.parametrize("pred", [True, False])
def test_traced_predicate_runs_the_function_or_returns_the_carry(pred):
    carry = {"w": jnp.arange(6.0).reshape(2, 3), "n": jnp.int32(4)}
    out = jax.jit(lambda p, c: run_if(p, _bump, c))(jnp.asarray(pred), carry)
    want = _bump(carry) if pred else carry
    for k in carry:
        np.testing.assert_array_equal(np.asarray(out[k]), np.asarray(want[k]))
        assert out[k].dtype == carry[k].dtype


def test_a_predicate_known_while_tracing_leaves_no_loop():
    carry = {"w": jnp.ones(3), "n": jnp.int32(0)}
    for pred, n in ((True, 1), (False, 0)):
        jaxpr = jax.make_jaxpr(lambda c, pred=pred: run_if(pred, _bump, c))(carry)
        assert "while" not in str(jaxpr)
        assert int(jax.jit(lambda c, pred=pred: run_if(pred, _bump, c))(carry)["n"]) == n


def test_vmapped_predicate_selects_per_member():
    carry = {"w": jnp.arange(4.0)[:, None] * jnp.ones((4, 2)), "n": jnp.zeros(4, jnp.int32)}
    pred = jnp.array([True, False, True, False])
    out = jax.vmap(lambda p, c: run_if(p, _bump, c))(pred, carry)
    np.testing.assert_array_equal(np.asarray(out["n"]), [1, 0, 1, 0])
    np.testing.assert_array_equal(np.asarray(out["w"][:, 0]), [1.0, 1.0, 5.0, 3.0])


def _main_loop_body_copies(text: str, shape: str) -> int:
    """``copy`` instructions of ``f32[shape]`` in the training loop's body (the ENTRY's while body)."""
    comps, cur = {}, None
    for line in text.splitlines():
        m = re.match(r"^(ENTRY )?%?([\w.\-]+) .*\{\s*$", line)
        if m and not line.startswith(" "):
            cur = m.group(2)
            comps[cur] = []
            if m.group(1):
                entry = cur
            continue
        if cur:
            comps[cur].append(line)
    body = next(re.search(r"body=%([\w.\-]+)", line).group(1) for line in comps[entry] if " while(" in line)
    return sum(len(re.findall(rf"f32\[{shape}\]\{{1,0\}} copy\(", line)) for line in comps[body])


def test_plas_past_its_warm_up_copies_no_vae_weight_per_update(pendulum_small):
    """With ``lax.cond`` on the agent, XLA copied the frozen VAE's and the actor's weights on
    every update (about 9 MB per update at throughput.py's 750-wide VAE); ``run_if`` does not."""
    module = get_algorithm("plas")
    config = apply_overrides(module.Config(), {**TINY, "vae_hidden_dims": "48,48", "warmup_steps": "2"})
    data, info = engine.prepare_data(pendulum_small, config)
    agents, keys = engine.create_agents(module, config, info.obs_dim, info.action_dim, seed=0, seeds=1)
    from offrl.engine.chunks import make_chunk_fn, unstack

    fn = make_chunk_fn(module, 4, config.batch_size, False)
    text = fn.lower(unstack(agents), keys[0], data).compile().as_text()
    assert _main_loop_body_copies(text, "48,48") == 0
