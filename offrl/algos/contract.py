"""The algorithm contract, written once: what an algorithm module must define and may declare.

An algorithm is one module ``offrl/algos/<name>.py`` (registered by name in :mod:`offrl.algos`;
a user's own module with :func:`offrl.algos.register`) that meets :class:`Algorithm` and ends
with one declared :class:`AlgorithmSpec`::

    SPEC = AlgorithmSpec(name="dt", return_conditioned=True, extra_arrays=extra_arrays,
                         sample=sample, rollout_policy=rollout_policy, ...)

Shared code reads ``algorithm_spec(module)``; it never guesses a capability from which functions a
module happens to define, and never names an algorithm. :func:`check_spec` refuses a spec whose
capabilities and hooks disagree; the registry runs it when it imports a module, and a test runs it
over every registered algorithm. ``docs/adding-an-algorithm.md`` builds a minimal algorithm.

Required (``Algorithm``)
------------------------
``Config``  frozen dataclass; every field documented with its range (:mod:`offrl.algos.ranges`),
            paper defaults cited. Optional class-level declarations read by the config machinery:
            ``RENAMED = {old: new}`` (old field names accepted for one release, with a warning),
            ``ABSENT = {field: value}`` (the value a saved config that predates ``field`` meant, used
            when its ``config.json`` lacks the field, so an old run loads with the behaviour it was
            trained with, not the new default) and
            ``ORDERED_FIELDS = ((low, high), ...)`` (pairs that must increase). Fields the engine
            reads when present (absent means off): ``batch_size`` (required),
            ``normalize_observations`` (bool), ``reward_scaling`` (``"none"``, ``"returns"`` =
            ``1000 / (max episode return - min episode return)``, or a number as a string),
            ``reward_bias`` (added after scaling), ``discount`` (discounted evaluation returns),
            ``schedule_steps`` (``None`` -> the run's number of steps, for learning-rate schedules).
``Agent``   a ``flax.struct.PyTreeNode`` holding the whole learner state (params, optimiser states,
            an ``rng`` when ``update`` draws noise) with a scalar ``step`` (the engine folds it into
            each minibatch's key, so a resumed run draws the same batches) and the config as a
            static field; with ``hparams: dict`` when the spec declares ``traced_fields``.
``create(config, obs_dim, action_dim, key) -> Agent``
``update(agent, batch) -> (agent, metrics)``  pure and jittable; metrics are scalars.
``act(agent, observations) -> actions``       deterministic; continuous actions in ``[-1, 1]``,
                                               discrete ones as integer indices.
``q_value(agent, observations, actions)``      the critic's estimate, or ``None`` without a critic.

Optional hooks (fields of ``AlgorithmSpec``; ``None`` means the engine's default)
-------------------------------------------------------------------------------
``extra_arrays(dataset, info, config) -> {name: array}``  per-transition arrays put on the device
    beside the five transition fields (Cal-QL's ``mc_returns``, DT's ``returns_to_go``); they reach
    ``update`` in ``batch.extras`` with the default sampler.
``sample(data, key, batch_size) -> batch``  the minibatch sampler (default: i.i.d. rows as a
    :class:`offrl.algos.common.Batch`); sequence models draw segments.
``config_for_dataset(config, dataset, info) -> Config``  fills data-dependent defaults once, when a
    run starts (DT's target return, TT's bin edges); stored in the run's ``config.json``.
``rollout_policy(agents, info, seeds, envs_per_seed, **policy_options) -> (act, initial_carry)``
    a rollout-layer policy (:mod:`offrl.rollout`) for evaluation instead of the deterministic
    ``act`` (planning, history): ``act(agents, carry, obs, key) -> (env_actions, carry)`` for
    ``seeds * envs_per_seed`` envs laid out seed-major, ``agents`` stacked on the seed axis, with
    an optional ``act.observe(carry, rewards, done) -> carry``. The first four parameters carry
    these names; ``policy_options`` holds ``target_return`` (env units) only when the spec is
    ``return_conditioned``, and is empty otherwise.
``explore(agent, observations, key) -> actions``  the exploration policy of online fine-tuning.
``online_extras(rewards, terminal, config) -> {name: array}``  per-row values of a finished online
    episode for the replay buffer (Cal-QL's Monte-Carlo returns); ``online_extras_fill`` gives
    each such key's value while its episode is still open.
``online_config(config) -> Config``  the algorithm's own changes for the online phase of
    ``offrl finetune`` (Cal-QL drops its bound unless ``calibrated_online``); applied before the
    fine-tuning flags' changes.
``export_arrays(agent) -> (arrays, meta)``  a custom NumPy export (DT), read back by a
    loader that ``meta["policy"]`` names (:mod:`offrl.policy`).
``policy_layers(agent) -> [(kernel, bias), ...]``  the MLP layers ``offrl export`` writes (default:
    the ``DeterministicActor`` / ``GaussianActor`` mean path of ``agent.actor``); ``agent`` is one
    seed's agent as NumPy arrays. A discrete algorithm's layers end in its logits or Q-values
    (the export acts by ``argmax``).

Capabilities
------------
``action_space``      ``"continuous"`` or ``"discrete"``: which datasets the algorithm accepts.
``finetunable``       ``offrl finetune`` continues its runs online; needs ``explore``.
``return_conditioned``  ``evaluate --target-return`` applies; needs ``rollout_policy`` accepting
                      ``target_return``.
``exportable``        ``offrl export`` writes a NumPy policy: ``export_arrays``, ``policy_layers``, or
                      the default MLP actor (continuous only; a discrete spec needs one of the
                      two hooks). ``False``: ``offrl export`` refuses the run in one line.
``traced_fields``     config fields ``update`` reads through :func:`offrl.algos.common.hyperparameter`;
                      only these may differ between the members of one compiled sweep program.
"""

from __future__ import annotations

import dataclasses
import inspect
from types import ModuleType
from typing import Any, Callable, Literal, Mapping, Protocol, runtime_checkable

from offrl.errors import ConfigError


@runtime_checkable
class Algorithm(Protocol):
    """The required part of an algorithm module (see the module docstring)."""

    Config: type
    Agent: type

    def create(self, config: Any, obs_dim: int, action_dim: int, key: Any) -> Any: ...
    def update(self, agent: Any, batch: Any) -> tuple[Any, Mapping[str, Any]]: ...
    def act(self, agent: Any, observations: Any) -> Any: ...
    def q_value(self, agent: Any, observations: Any, actions: Any) -> Any: ...


@dataclasses.dataclass(frozen=True)
class AlgorithmSpec:
    """One algorithm's declared capabilities and optional hooks (see the module docstring)."""

    name: str
    action_space: Literal["continuous", "discrete"] = "continuous"
    finetunable: bool = False
    return_conditioned: bool = False
    exportable: bool = True
    traced_fields: tuple[str, ...] = ()
    extra_arrays: Callable | None = None
    sample: Callable | None = None
    config_for_dataset: Callable | None = None
    rollout_policy: Callable | None = None
    explore: Callable | None = None
    online_extras: Callable | None = None
    online_extras_fill: Mapping[str, float] = dataclasses.field(default_factory=dict)
    online_config: Callable | None = None
    export_arrays: Callable | None = None
    policy_layers: Callable | None = None


REQUIRED = ("Config", "Agent", "create", "update", "act", "q_value")


def algorithm_spec(module: ModuleType) -> AlgorithmSpec:
    """The module's declared ``SPEC``; a module without one is not an algorithm."""
    spec = getattr(module, "SPEC", None)
    if not isinstance(spec, AlgorithmSpec):
        raise ConfigError(f"{module.__name__} declares no SPEC = AlgorithmSpec(...); see offrl/algos/contract.py.")
    return spec


def check_spec(module: ModuleType) -> AlgorithmSpec:
    """Refuse a module that misses a required name or whose spec declares a capability without its hook."""
    missing = [name for name in REQUIRED if not hasattr(module, name)]
    if missing:
        raise ConfigError(f"{module.__name__} misses {', '.join(missing)}; see offrl/algos/contract.py.")
    spec = algorithm_spec(module)
    name = module.__name__
    if not isinstance(spec.name, str) or not spec.name:
        raise ConfigError(f"{name}: SPEC.name must be the algorithm's name, a non-empty string.")
    if spec.action_space not in ("continuous", "discrete"):
        raise ConfigError(f"{name}: SPEC.action_space is {spec.action_space!r}; it must be 'continuous' or 'discrete'.")
    if spec.finetunable and spec.explore is None:
        raise ConfigError(f"{name}: SPEC declares finetunable=True without an explore hook.")
    if spec.return_conditioned and spec.rollout_policy is None:
        raise ConfigError(f"{name}: SPEC declares return_conditioned=True without a rollout_policy hook.")
    if spec.online_config is not None and not spec.finetunable:
        raise ConfigError(f"{name}: SPEC sets an online_config hook but is not finetunable.")
    if spec.online_extras_fill and spec.online_extras is None:
        raise ConfigError(f"{name}: SPEC sets online_extras_fill without an online_extras hook.")
    if spec.rollout_policy is not None:
        _check_rollout_policy(name, spec)
    if spec.exportable and spec.action_space == "discrete" and spec.policy_layers is None and spec.export_arrays is None:
        raise ConfigError(f"{name}: SPEC declares a discrete exportable algorithm without policy_layers or export_arrays "
                          "(the default export reads a continuous MLP actor); add one or set exportable=False.")
    fields = {f.name for f in dataclasses.fields(module.Config)}
    unknown = [f for f in spec.traced_fields if f not in fields]
    if unknown:
        raise ConfigError(f"{name}: SPEC.traced_fields names {', '.join(unknown)}, which Config does not have.")
    if spec.traced_fields and "hparams" not in {f.name for f in dataclasses.fields(module.Agent)}:
        raise ConfigError(f"{name}: SPEC declares traced_fields but Agent has no 'hparams' field.")
    return spec


ROLLOUT_PARAMETERS = ("agents", "info", "seeds", "envs_per_seed")


def _check_rollout_policy(name: str, spec: AlgorithmSpec) -> None:
    """``rollout_policy``'s first parameters are named as in the contract; a return-conditioned
    spec's accepts ``target_return`` (by name or ``**policy_options``)."""
    params = list(inspect.signature(spec.rollout_policy).parameters.values())
    positional = tuple(p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD))
    if positional[:4] != ROLLOUT_PARAMETERS:
        raise ConfigError(f"{name}: rollout_policy's parameters are ({', '.join(positional)}); the contract's are "
                          f"({', '.join(ROLLOUT_PARAMETERS)}, **policy_options).")
    takes_target = any(p.name == "target_return" and p.kind != p.POSITIONAL_ONLY for p in params) or \
        any(p.kind == p.VAR_KEYWORD for p in params)
    if spec.return_conditioned and not takes_target:
        raise ConfigError(f"{name}: SPEC declares return_conditioned=True but rollout_policy takes no target_return.")
