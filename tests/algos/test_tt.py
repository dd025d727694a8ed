"""Trajectory Transformer: tokeniser round trip, next-token loss by hand, windows, planning, a short run."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from offrl.algos import tt
from offrl.algos.common import apply_overrides


@pytest.mark.parametrize("kind", ["uniform", "quantile"])
def test_tokeniser_round_trip_within_one_bin_width(kind):
    rng = np.random.default_rng(0)
    x = np.stack([rng.normal(size=2000), rng.exponential(size=2000) * 50, rng.uniform(-1, 1, 2000)], axis=1)
    edges = tt.fit_bin_edges(x, 100, kind)
    bins = np.asarray(tt.tokenize(jnp.asarray(x, jnp.float32), jnp.asarray(edges)))
    assert bins.min() >= 0 and bins.max() <= 99
    back = np.asarray(tt.detokenize(jnp.asarray(bins), jnp.asarray(edges)))
    width = np.take_along_axis(np.diff(edges, axis=1).T, bins, axis=0)   # each value's own bin width
    assert np.all(np.abs(back - x) <= width + 1e-4)
    if kind == "quantile":   # equal counts per bin, up to ties
        counts = np.bincount(bins[:, 0], minlength=100)
        assert counts.min() >= 15 and counts.max() <= 25


def test_next_token_nll_by_hand():
    logits = jnp.array([[[0.0, np.log(3.0)], [0.0, 0.0]]])     # p = (1/4, 3/4), then (1/2, 1/2)
    tokens = jnp.array([[1, 0]])
    both = float(tt.next_token_nll(logits, tokens, jnp.array([[True, True]])))
    assert both == pytest.approx((-np.log(0.75) - np.log(0.5)) / 2, rel=1e-6)
    assert float(tt.next_token_nll(logits, tokens, jnp.array([[False, True]]))) == pytest.approx(np.log(2.0), rel=1e-6)


def test_gpt_next_token_is_causal():
    config = apply_overrides(tt.Config(), {"embed_dim": "16", "num_layers": "1", "num_bins": "5", "dropout": "0",
                                           "sequence_length": "2"})
    agent = tt.create(config, 2, 1, jax.random.PRNGKey(0))
    tokens = jnp.array([[1, 2, 3, 4, 0, 1, 2, 3]])
    valid = jnp.ones_like(tokens, bool)
    base = np.asarray(agent.actor.apply_fn(agent.actor.params, tokens, valid))
    out = np.asarray(agent.actor.apply_fn(agent.actor.params, tokens.at[0, 5].set(4), valid))
    np.testing.assert_array_equal(out[0, :5], base[0, :5])
    assert not np.allclose(out[0, 5], base[0, 5])


def test_short_run_learns_and_plans(tmp_path, capsys):
    """A few hundred updates on pendulum-medium-replay: the next-token loss falls below the
    uniform ``log(num_bins)``; evaluation plans every action and reports the time per action;
    ``offrl export`` and ``offrl evaluate --target-return`` refuse the run in one line (exit 2)."""
    import offrl
    from offrl import engine

    overrides = {"num_bins": "20", "embed_dim": "32", "num_layers": "1", "beam_width": "4", "horizon": "2",
                 "sequence_length": "2", "batch_size": "32"}
    run = offrl.train("tt", "pendulum-medium-replay-v0", steps=300, seeds=1, eval_every=300, eval_episodes=1,
                      log_every=100, progress=False, out=tmp_path / "run", config_overrides=overrides)
    losses = [r["actor_loss"] for r in run.metrics]
    assert losses[-1] < losses[0] < np.log(20) + 0.5 and losses[-1] < np.log(20) - 0.3
    assert len(run.config.bin_edges) == (3 + 1 + 2) * 21
    loaded = engine.load_run(tmp_path / "run")
    assert loaded.config == run.config
    policy, _ = tt.rollout_policy(loaded.agent, loaded.info, 1, 1)
    actions, _ = policy(loaded.agent, None, np.zeros((1, 3), np.float32), jax.random.PRNGKey(0))
    actions, _ = policy(loaded.agent, None, np.ones((1, 3), np.float32), jax.random.PRNGKey(1))
    assert actions.shape == (1, 1) and np.all(np.abs(actions) <= 2.0)
    assert 0 < policy.seconds_per_action < 5.0
    from offrl.cli import main

    capsys.readouterr()
    assert main(["export", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "does not support tt" in err[0] and not (tmp_path / "run" / "export").exists()
    # TT plans but is not return-conditioned: --target-return is refused in one line (it was a TypeError)
    for flag in (["--target-return", "300"], ["--target-returns=-300,-150"]):
        assert main(["evaluate", str(tmp_path / "run"), "--episodes", "1", *flag]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "applies to return-conditioned algorithms (dt)" in err[0] and "--algo tt" in err[0], err
