import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "engine"))

from pendulum_data import make_pendulum_dataset  # noqa: E402


def tiny_state(seed: int = 0) -> dict:
    """A small agent-shaped pytree: nested params of two dtypes, a step counter and data keys."""
    rng = np.random.default_rng(seed)
    return {
        "agent": {
            "actor": {"params": {"kernel": rng.normal(size=(3, 4)).astype(np.float32), "bias": np.zeros(4, np.float32)}},
            "critic": {"params": {"kernel": rng.normal(size=(4, 2)).astype(np.float32)}},
            "step": np.array(7, np.int32),
        },
        "data_keys": rng.integers(0, 2**31, size=(1, 2)).astype(np.uint32),
    }


def trees_equal(a, b) -> bool:
    import jax

    la, lb = jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)
    return len(la) == len(lb) and all(np.asarray(x).dtype == np.asarray(y).dtype and np.array_equal(x, y) for x, y in zip(la, lb))


@pytest.fixture(scope="session")
def pendulum_small():
    """3 episodes (600 transitions) of the noisy Pendulum controller: enough for plumbing tests."""
    return make_pendulum_dataset(episodes=3, noise=1.0, seed=1)
