import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from pendulum_data import make_pendulum_dataset  # noqa: E402

#: returns of uniformly random actions and of the noiseless swing-up controller on Pendulum-v1,
#: measured with tests/engine/pendulum_data.py (10 episodes each): -1211.5 and -132.5.
PENDULUM_RANDOM, PENDULUM_EXPERT = -1211.5, -132.5

TINY = {"hidden_dims": "32,32", "batch_size": "32"}


def with_references(dataset):
    return dataset.replace(metadata={**dataset.metadata, "ref_min_score": PENDULUM_RANDOM, "ref_max_score": PENDULUM_EXPERT})


@pytest.fixture(scope="session")
def pendulum_small():
    """3 episodes (600 transitions) of the noisy controller: enough for plumbing tests."""
    return with_references(make_pendulum_dataset(episodes=3, noise=1.0, seed=1))


@pytest.fixture(scope="session")
def pendulum_medium():
    """20 episodes (4,000 transitions) of the swing-up controller with Gaussian action noise
    of std 1.0 (half the torque range): a decent but imperfect behaviour policy."""
    return with_references(make_pendulum_dataset(episodes=20, noise=1.0, seed=0))
