"""Every algorithm whose spec is fine-tunable continues online through the one online learner.

The remedies are tested on CQL, Cal-QL, TD3+BC and IQL in ``test_finetune.py``; here each other
fine-tunable algorithm runs one short offline -> online pass, so a spec that declares
``finetunable=True`` with an ``explore`` hook that does not fit the learner fails a test.
"""

import numpy as np
import pytest

from offrl import engine
from offrl.algos import algorithm_names
from offrl.finetuning import finetune

COVERED = {"cql", "cal_ql", "td3_bc", "iql"}  # test_finetune.py
SMALL = {"hidden_dims": "32,32", "batch_size": "32"}
EXTRA = {"sac_n": {"num_qs": "3"}, "edac": {"num_qs": "3"}, "lb_sac": {"num_qs": "3"}}
SHORT = dict(steps=80, update_every=20, start_steps=40, eval_every=80, eval_episodes=1, checkpoint_every=80, log_every=40)


@pytest.fixture(scope="module")
def saved_pendulum(tmp_path_factory, pendulum_small):
    from offrl import data

    root = tmp_path_factory.mktemp("ft-every")
    return data.save(pendulum_small.replace(metadata={**pendulum_small.metadata, "env_id": "Pendulum-v1"}), root / "pend.hdf5")


@pytest.mark.parametrize("algo", [n for n in algorithm_names(finetunable=True) if n not in COVERED])
def test_a_finetunable_spec_continues_online(saved_pendulum, tmp_path, algo):
    overrides = {**SMALL, **EXTRA.get(algo, {})}
    engine.train(algo, str(saved_pendulum), steps=20, seeds=1, eval_every=20, eval_episodes=0, log_every=20,
                 out=tmp_path / "offline", config_overrides=overrides, progress=False)
    result = finetune(tmp_path / "offline", out=tmp_path / "ft", progress=False, **SHORT)
    online = [r for r in result.metrics if r.get("phase") == "online"]
    assert {r["env_step"] for r in online} == {40, 80}
    assert all(np.isfinite(v) for r in online for k, v in r.items() if isinstance(v, float) and not k.startswith("eval/"))
    assert result.step > 20  # the agent was updated online
