"""tests/engine's ``pendulum_medium`` data for the algorithm tests: 20 episodes (4,000 transitions) of
the swing-up controller with action noise of std 1.0, normalised so that random = 0, controller = 100."""

import importlib.util
import sys
from pathlib import Path


def pendulum_medium():
    engine_tests = Path(__file__).resolve().parents[1] / "engine"
    spec = importlib.util.spec_from_file_location("engine_test_conftest", engine_tests / "conftest.py")
    sys.path.insert(0, str(engine_tests))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.with_references(module.make_pendulum_dataset(episodes=20, noise=1.0, seed=0))
