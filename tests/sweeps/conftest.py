import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "engine"))

from pendulum_data import make_pendulum_dataset  # noqa: E402




@pytest.fixture(scope="session")
def pendulum_tiny():
    """2 episodes (400 transitions): plumbing only."""
    return make_pendulum_dataset(episodes=2, noise=1.0, seed=1)
