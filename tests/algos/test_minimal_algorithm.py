"""The minimal algorithm of docs/adding-an-algorithm.md, taken from the page itself: it meets
the contract, registers, trains through ``offrl.engine.train`` on the bundled Pendulum data,
resumes an interrupted run bit-identically, loads back, and exports to NumPy, all through the
public API. If the page drifts from the code, this test fails."""

import importlib.util
import re
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

from offrl import engine
from offrl.algos import algorithm_names, algorithm_spec, register, unregister
from offrl.algos.contract import check_spec
from offrl.checkpoint import export_numpy_policy
from offrl.policy import load_numpy_policy

DOC = Path(__file__).resolve().parents[2] / "docs" / "adding-an-algorithm.md"
DATASET = "pendulum-medium-expert-v0"  # bundled; a linear policy explains 40% of its action variance


def doc_module_source() -> str:
    """The page's code block that starts with ``# linear_bc.py``."""
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    (source,) = [b for b in blocks if b.startswith("# linear_bc.py\n")]
    return source


@pytest.fixture(scope="module")
def linear_bc(tmp_path_factory):
    folder = tmp_path_factory.mktemp("user_algorithm")
    path = folder / "linear_bc.py"
    path.write_text(doc_module_source())
    spec = importlib.util.spec_from_file_location("linear_bc", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["linear_bc"] = module
    spec.loader.exec_module(module)
    register("linear_bc", module, "behaviour cloning with a linear policy")
    yield module
    unregister("linear_bc")
    sys.modules.pop("linear_bc", None)


def test_the_documented_module_is_a_few_dozen_lines_and_meets_the_contract(linear_bc):
    lines = [line for line in doc_module_source().splitlines() if line.strip()]
    assert len(lines) <= 60
    assert check_spec(linear_bc).name == "linear_bc"
    assert "linear_bc" in algorithm_names() and algorithm_spec("linear_bc").exportable


def _leaves(tree):
    return [np.asarray(x) for x in jax.tree_util.tree_leaves(tree)]


def test_trains_resumes_and_exports(linear_bc, tmp_path):
    from offrl.data import load

    kwargs = dict(steps=400, seeds=1, log_every=100, eval_every=200, eval_episodes=0, progress=False,
                  config_overrides={"batch_size": "64"})
    full = engine.train("linear_bc", DATASET, out=tmp_path / "full", **kwargs)
    assert full.step == 400

    # it learns: the final policy's MSE on the whole dataset (computed here in NumPy, independently
    # of the module) is well below that of always acting 0 (the initial policy, nearly), and the
    # logged minibatch loss agrees with it
    data = load(DATASET)
    agent = jax.tree_util.tree_map(lambda x: np.asarray(x[0]), full.agent)
    obs = full.info.normalize(data.observations)
    target = full.info.to_agent_action(data.actions)
    prediction = np.tanh(obs @ agent.params["kernel"] + agent.params["bias"])
    mse = np.mean(np.sum((prediction - target) ** 2, axis=-1))
    assert mse < 0.8 * np.mean(np.sum(target**2, axis=-1))
    assert abs(full.metrics[-1]["actor_loss"] - mse) < 0.05

    # an interrupted run resumed from its checkpoint ends bit-identical to the uninterrupted one
    engine.train("linear_bc", DATASET, out=tmp_path / "killed", stop_at=200, **kwargs)
    resumed = engine.train("linear_bc", DATASET, out=tmp_path / "killed", resume=True, **kwargs)
    assert resumed.step == 400
    assert all(np.array_equal(a, b) for a, b in zip(_leaves(resumed.agent), _leaves(full.agent)))
    reloaded = engine.load_run(tmp_path / "killed")
    assert all(np.array_equal(a, b) for a, b in zip(_leaves(reloaded.agent), _leaves(full.agent)))

    # the NumPy export acts like the JAX policy, in env units
    folder = export_numpy_policy(reloaded, tmp_path / "export")
    policy = load_numpy_policy(folder)
    batch = data.observations[:32]
    np.testing.assert_allclose(policy(batch), reloaded.act(batch), rtol=1e-5, atol=1e-5)
    assert policy.meta["algo"] == "linear_bc"
