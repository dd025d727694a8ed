"""The algorithm contract (offrl/algos/contract.py) and the lazy registry.

Every registered algorithm passes ``check_spec``; a module whose spec declares a capability
without the hook it needs fails it (so it fails this test, not a user); the registry imports
nothing heavy until asked; capabilities are read from the spec (the TT ``--target-return``
crash is refused in one line by construction).
"""

import dataclasses
import subprocess
import sys
import types

import flax
import numpy as np
import jax
import pytest

from offrl import algos
from offrl.algos import algorithm_names, algorithm_spec, get_algorithm
from offrl.algos.contract import AlgorithmSpec, check_spec
from offrl.errors import ConfigError


@pytest.mark.parametrize("name", algorithm_names())
def test_every_registered_algorithm_meets_the_contract(name):
    spec = check_spec(get_algorithm(name))
    assert spec.name == name


def test_capabilities_declared_by_the_built_in_specs():
    """The lists the specs must produce (written out here, not derived from the specs)."""
    assert set(algorithm_names(finetunable=True)) == {"cql", "cal_ql", "iql", "awac", "td3_bc", "td3",
                                                       "rebrac", "sac_n", "edac", "lb_sac", "spot", "fql"}
    assert algorithm_names(return_conditioned=True) == ("dt",)
    assert set(algorithm_names(exportable=False)) == {"tt", "diffuser", "bcq", "discrete_bcq", "plas", "idql"}
    assert set(algorithm_names(action_space="discrete")) == {"discrete_bc", "dqn", "double_dqn", "discrete_cql",
                                                             "discrete_bcq", "discrete_iql"}
    assert algorithm_spec("cal_ql").online_extras_fill == {"mc_returns": float("-inf")}
    assert "discount" not in algorithm_spec("cal_ql").traced_fields and "discount" in algorithm_spec("cql").traced_fields


def test_importing_the_registry_imports_no_algorithm_and_no_jax():
    code = ("import sys, offrl.algos as a; s = a.algorithm_summaries(); names = list(a.ALGORITHMS); "
            "assert 'jax' not in sys.modules, 'jax'; assert not [m for m in sys.modules if m.startswith('offrl.algos.')], "
            "[m for m in sys.modules if m.startswith('offrl.algos.')]; "
            "assert set(s) == set(names) == set(a.ALGORITHM_NAMES) and all(s.values()); print(len(names))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(len(algos.ALGORITHM_NAMES))


def test_unknown_names_and_bad_registrations_are_one_line():
    with pytest.raises(ConfigError, match="unknown algorithm 'sarsa'; choose one of: bc, td3"):
        get_algorithm("sarsa")
    assert get_algorithm("td3+bc") is get_algorithm("td3_bc")
    with pytest.raises(ConfigError, match="'iql' is a built-in algorithm"):
        algos.register("iql", "my.iql")
    algos.register("ghost", "no_such_package.ghost")
    try:
        with pytest.raises(ConfigError, match="registered as module 'no_such_package.ghost', which cannot be imported") as info:
            get_algorithm("ghost")
        assert "\n" not in str(info.value)
    finally:
        algos.unregister("ghost")
    assert "ghost" not in algorithm_names()


# ---------------------------------------------------------------------- specs that must fail
def _module(**spec_fields):
    """A module that meets the required part of the contract, with ``SPEC`` built from ``spec_fields``."""

    @dataclasses.dataclass(frozen=True)
    class Config:
        batch_size: int = 8
        tau: float = 0.005

    class Agent(flax.struct.PyTreeNode):
        step: jax.Array
        config: Config = flax.struct.field(pytree_node=False)

    m = types.ModuleType("fake_algo")
    m.Config, m.Agent = Config, Agent
    m.create = lambda config, obs_dim, action_dim, key: Agent(jax.numpy.zeros((), jax.numpy.int32), config)
    m.update = lambda agent, batch: (agent.replace(step=agent.step + 1), {})
    m.act = lambda agent, observations: observations[:, :1] * 0.0
    m.q_value = lambda agent, observations, actions: None
    m.SPEC = AlgorithmSpec(name="fake_algo", **spec_fields)
    return m


def explore(agent, observations, key):
    return observations


def rollout_with_target(agents, info, seeds, envs_per_seed, target_return=None):
    return None, None


def rollout_without_target(agents, info, seeds, envs_per_seed):
    return None, None


def rollout_misnamed(agents, info, seeds, episodes):
    return None, None


def online_extras(rewards, terminal, config):
    return {}


def policy_layers(agent):
    return []


def test_a_consistent_spec_passes():
    spec = check_spec(_module(finetunable=True, explore=explore, return_conditioned=True,
                              rollout_policy=rollout_with_target, online_extras=online_extras,
                              online_extras_fill={"x": 0.0}))
    assert spec.finetunable and spec.return_conditioned
    assert check_spec(_module(action_space="discrete", policy_layers=policy_layers)).action_space == "discrete"
    assert check_spec(_module(action_space="discrete", exportable=False)).exportable is False


@pytest.mark.parametrize("fields, message", [
    (dict(finetunable=True), "finetunable=True without an explore hook"),
    (dict(return_conditioned=True), "return_conditioned=True without a rollout_policy hook"),
    (dict(return_conditioned=True, rollout_policy=rollout_without_target), "rollout_policy takes no target_return"),
    (dict(rollout_policy=rollout_misnamed), r"rollout_policy's parameters are \(agents, info, seeds, episodes\)"),
    (dict(traced_fields=("expectile",)), "traced_fields names expectile, which Config does not have"),
    (dict(traced_fields=("tau",)), "traced_fields but Agent has no 'hparams' field"),
    (dict(online_extras_fill={"mc_returns": 0.0}), "online_extras_fill without an online_extras hook"),
    (dict(action_space="image"), "must be 'continuous' or 'discrete'"),
    (dict(action_space="discrete"), "discrete exportable algorithm without policy_layers or export_arrays"),
    (dict(name=""), "SPEC.name must be"),
])
def test_a_capability_without_its_hook_fails_check_spec(fields, message):
    module = _module(**{k: v for k, v in fields.items() if k != "name"})
    if "name" in fields:
        module.SPEC = dataclasses.replace(module.SPEC, name=fields["name"])
    with pytest.raises(ConfigError, match=message) as info:
        check_spec(module)
    assert "\n" not in str(info.value)


def test_missing_required_names_or_spec_fail_check_spec():
    module = _module()
    del module.q_value
    with pytest.raises(ConfigError, match="fake_algo misses q_value"):
        check_spec(module)
    module = _module()
    del module.SPEC
    with pytest.raises(ConfigError, match=r"declares no SPEC = AlgorithmSpec"):
        check_spec(module)


def test_register_refuses_a_module_that_breaks_the_contract():
    with pytest.raises(ConfigError, match="without an explore hook"):
        algos.register("fake_algo", _module(finetunable=True))
    assert "fake_algo" not in algorithm_names()


# ---------------------------------------------------------------------- readers of the spec
def test_target_return_on_a_planner_is_refused_in_one_line():
    """TT and Diffuser have a rollout_policy but are not return-conditioned: the flag is refused
    by the spec, before any env is built (it used to end in a TypeError)."""
    from offrl.engine.evaluation import Evaluator
    from offrl.target_returns import check_return_conditioned

    for name in ("tt", "diffuser", "iql"):
        with pytest.raises(ConfigError, match=f"return-conditioned algorithms \\(dt\\); this run was trained with --algo {name}") as info:
            check_return_conditioned(name)
        assert "\n" not in str(info.value)
        with pytest.raises(ConfigError, match=f"--target-return applies to return-conditioned algorithms \\(dt\\); --algo {name}"):
            Evaluator(get_algorithm(name), None, None, "Pendulum-v1", 1, 1, 0.99, policy_options={"target_return": 300.0})
    check_return_conditioned("dt")


def test_planners_report_planning_time_per_env_step_and_per_action():
    """A planner's evaluation reports the mean planning call (first, compiling call excluded) and
    that call divided by the envs it planned for together; other algorithms report neither."""
    from offrl.algos.planning import PlanningPolicy
    from offrl.engine.evaluation import _mean_after_first, summarise_evaluation

    policy = PlanningPolicy(lambda agent, obs, key: obs, None, seeds=2)
    policy.planning_seconds[:] = [5.0, 0.2, 0.4]
    policy.num_envs = 4
    assert _mean_after_first(policy.planning_seconds) == pytest.approx(0.3)
    assert policy.seconds_per_action == pytest.approx(0.3 / 4)
    base = {k: np.ones((2, 1)) for k in ("return", "normalized_score", "length", "q_estimate", "discounted_return")}
    rows = summarise_evaluation({**base, "planning_seconds_per_step": np.full((2, 1), 0.3),
                                 "planning_seconds_per_action": np.full((2, 1), 0.075)})
    assert [r["eval/planning_ms_per_step"] for r in rows] == pytest.approx([300.0, 300.0])
    assert [r["eval/planning_ms_per_action"] for r in rows] == pytest.approx([75.0, 75.0])
    assert not any(k.startswith("eval/planning") for k in summarise_evaluation(base)[0])


def test_traceable_fields_reads_the_spec():
    from offrl.algos import cal_ql, td3, td3_bc
    from offrl.algos.common import traceable_fields

    assert traceable_fields(td3_bc.Config) == traceable_fields("td3_bc") == td3.SPEC.traced_fields
    assert traceable_fields(cal_ql) == ("tau", "cql_alpha", "logsumexp_temperature", "target_action_gap")
    assert traceable_fields(_module().Config) == ()  # a Config outside an algorithm module
