"""What every algorithm file shares: the ``Batch`` type, train states, config overrides.

The contract an algorithm module meets (``Config``, ``Agent``, ``create``, ``update``, ``act``,
``q_value``, its declared ``SPEC`` and the config fields the engine reads) is written once in
:mod:`offrl.algos.contract`.
"""

from __future__ import annotations

import dataclasses
import typing
import warnings
from typing import Any, Mapping, NamedTuple

import jax
import jax.numpy as jnp
import optax
from flax.training.train_state import TrainState

from offrl import losses
from offrl.algos.ranges import check_config
from offrl.errors import ConfigError


class Batch(NamedTuple):
    """A minibatch of transitions (arrays on the device).

    ``actions`` are in ``[-1, 1]``; ``masks = 1 - terminals`` (timeouts still bootstrap);
    ``rewards`` are already scaled by the engine. ``extras`` holds the arrays an algorithm asked
    for through its ``extra_arrays`` hook (e.g. Cal-QL's ``mc_returns``), by name.
    """

    observations: jax.Array       # (B, obs_dim)
    actions: jax.Array            # (B, action_dim)
    rewards: jax.Array            # (B,)
    next_observations: jax.Array  # (B, obs_dim)
    masks: jax.Array              # (B,)
    extras: Mapping[str, jax.Array] = {}

    @classmethod
    def from_rows(cls, rows: Mapping[str, jax.Array]) -> "Batch":
        """The five transition fields from ``rows``, every other key into ``extras``."""
        fields = cls._fields[:-1]
        return cls(*(rows[k] for k in fields), extras={k: v for k, v in rows.items() if k not in fields})


def make_train_state(module, params, learning_rate, max_grad_norm: float | None = None) -> TrainState:
    """An Adam ``TrainState`` for ``module`` (``learning_rate`` may be an optax schedule)."""
    tx = optax.adam(learning_rate)
    if max_grad_norm is not None:
        tx = optax.chain(optax.clip_by_global_norm(max_grad_norm), tx)
    return TrainState.create(apply_fn=module.apply, params=params, tx=tx)


def apply_gradients_with_loss(state: TrainState, loss_fn, *args, lr_scale=None):
    """One ``jax.value_and_grad`` over ``loss_fn(params, *args) -> (loss, aux)`` and one Adam step.

    ``lr_scale`` (from :func:`learning_rate_scale`) multiplies the step: Adam's update is linear
    in its learning rate (and in a cosine schedule's initial value), so scaling the update of an
    optimiser built with ``lr`` by ``lr' / lr`` is the step an optimiser built with ``lr'`` takes.
    """
    (loss, aux), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params, *args)
    if lr_scale is None:
        return state.apply_gradients(grads=grads), loss, aux
    updates, opt_state = state.tx.update(grads, state.opt_state, state.params)
    updates = jax.tree_util.tree_map(lambda u: u * lr_scale, updates)
    return state.replace(step=state.step + 1, params=optax.apply_updates(state.params, updates),
                         opt_state=opt_state), loss, aux


def run_if(pred, fn, carry):
    """``fn(carry)`` where ``pred`` holds, else ``carry`` unchanged; ``fn`` returns a pytree of the
    same structure, shapes and dtypes as ``carry``.

    The same as ``lax.cond(pred, fn, lambda c: c, carry)``, written as a while loop of zero or one
    trips, which updates its carry in place. In PLAS's update a ``cond`` on the agent made XLA's CPU
    backend copy the passed-through weights (the frozen 750-wide VAE, the actor, the targets) on
    every update, whichever branch ran: 10 MB per update, 4 MB with this (``tests/engine/
    test_run_if.py``; the update is bit-identical). Not every ``cond`` copies (a small one on two
    arrays compiles without), and where little passes through (TD3's delayed actor step) the two
    cost the same, so the other algorithms keep ``lax.cond``.
    """
    if not isinstance(pred, jax.core.Tracer):        # known while tracing (a constant step): no loop at all
        return fn(carry) if bool(pred) else carry

    def body(state):
        return jnp.zeros((), bool), fn(state[1])

    return jax.lax.while_loop(lambda state: state[0], body, (jnp.asarray(pred, bool), carry))[1]


def scalar_train_state(initial_value: float, learning_rate: float) -> TrainState:
    """An Adam ``TrainState`` over one learned scalar ``{"value": log(initial_value)}`` (SAC's and
    CQL's ``log entropy_alpha``, CQL's Lagrange multiplier); ``apply_fn(params)`` returns it."""
    value = jnp.log(jnp.asarray(initial_value, jnp.float32))
    return TrainState.create(apply_fn=lambda params: params["value"], params={"value": value},
                             tx=optax.adam(learning_rate))


# ---------------------------------------------------------------------- shared critic pieces
def min_q_value(agent, observations: jax.Array, actions: jax.Array) -> jax.Array:
    """``min_k Q_k(s, a)`` of an agent whose ``critic`` is an :class:`offrl.nets.EnsembleCritic`
    (the ``q_value`` of every algorithm with a clipped double-Q critic)."""
    return agent.critic.apply_fn(agent.critic.params, observations, actions).min(0)


def td_critic_loss(params, agent, batch: Batch, target: jax.Array):
    """``sum_k mean_i (Q_k(s_i, a_i) - y_i)^2`` (:func:`offrl.losses.td_loss`) for the agent's
    ensemble critic at ``params``; ``target`` is built by the caller from its target networks."""
    q = agent.critic.apply_fn(params, batch.observations, batch.actions)
    return losses.td_loss(q, target), {"q": q.mean()}


# ---------------------------------------------------------------------- traced hyperparameters
def hyperparameter(agent, name: str):
    """The value of config field ``name`` for ``agent``: its traced per-member value from
    ``agent.hparams`` when a sweep trains several configurations as one vmapped program
    (:mod:`offrl.sweeps`), otherwise the static ``agent.config`` value.

    An algorithm lists the fields its ``update`` reads through this helper in its spec's
    ``traced_fields`` (:mod:`offrl.algos.contract`); only those may differ between the members
    of one compiled program.
    """
    traced = getattr(agent, "hparams", None)
    if traced and name in traced:
        return traced[name]
    return getattr(agent.config, name)


def learning_rate_scale(agent, name: str):
    """``traced / static`` value of the learning-rate field ``name`` when a sweep traces it,
    else ``None`` (no scaling): the ``lr_scale`` of :func:`apply_gradients_with_loss`."""
    traced = getattr(agent, "hparams", None)
    if traced and name in traced:
        return traced[name] / getattr(agent.config, name)
    return None


def traceable_fields(algorithm) -> tuple[str, ...]:
    """Config fields an algorithm reads through :func:`hyperparameter`: its spec's
    ``traced_fields``. ``algorithm`` is a name, a module, or a ``Config`` class (read from the
    spec of the module that defines it; ``()`` when that module declares none)."""
    import sys
    from types import ModuleType

    from offrl.algos import algorithm_spec

    if isinstance(algorithm, (str, ModuleType)):
        return algorithm_spec(algorithm).traced_fields
    module = sys.modules.get(algorithm.__module__)
    try:
        return algorithm_spec(module).traced_fields if module is not None else ()
    except ConfigError:  # a Config defined outside an algorithm module
        return ()


# ---------------------------------------------------------------------- configs

def _convert(value: Any, annotation: Any, name: str):
    if not isinstance(value, str):
        return value
    text = value.strip()
    tp = annotation
    tp_text = str(tp)
    try:
        if tp in (bool, "bool"):
            if text.lower() in ("1", "true", "yes", "on"):
                return True
            if text.lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError(text)
        if tp in (int, "int"):
            return int(float(text)) if "e" in text.lower() else int(text)
        if tp in (float, "float"):
            return float(text)
        if "tuple" in tp_text or "Sequence" in tp_text:
            parts = [p for p in text.strip("()[] ").split(",") if p.strip()]
            return tuple(int(p) for p in parts)
        if "None" in tp_text and text.lower() in ("none", "null"):
            return None
        if "int" in tp_text and "None" in tp_text:
            return int(float(text))
        if "float" in tp_text and "None" in tp_text:
            return float(text)
    except ValueError:
        raise ConfigError(f"config field '{name}' expects {tp_text}, got {value!r}; pass e.g. --set {name}=<value>.") from None
    return text


def apply_overrides(config, overrides: Mapping[str, Any] | None):
    """``dataclasses.replace(config, **overrides)`` with strings converted to the field's type.

    An unknown field raises :class:`ConfigError` listing the valid names; a value outside the
    field's declared range raises :class:`ConfigError` naming it (:func:`offrl.algos.ranges.check_config`).
    """
    if not overrides:
        check_config(config)
        return config
    fields = {f.name: f for f in dataclasses.fields(config)}
    hints = typing.get_type_hints(type(config))
    changes = {}
    for name, value in overrides.items():
        key = renamed_field(type(config), name.replace("-", "_"))
        if key not in fields:
            raise ConfigError(f"unknown config field '{name}' for {type(config).__module__.split('.')[-1]}; valid fields: {', '.join(fields)}.")
        changes[key] = _convert(value, hints.get(key, fields[key].type), key)
    config = dataclasses.replace(config, **changes)
    check_config(config)
    return config


def renamed_field(config_cls, name: str) -> str:
    """The current name of a config field: old names listed in ``Config.RENAMED`` (``{old: new}``)
    are accepted for one release, with a :class:`FutureWarning`."""
    new = getattr(config_cls, "RENAMED", {}).get(name)
    if new is None:
        return name
    warnings.warn(f"config field '{name}' is now called '{new}'; the old name will stop working in the next release.",
                  FutureWarning, stacklevel=3)
    return new


def config_to_dict(config) -> dict:
    out = {}
    for f in dataclasses.fields(config):
        v = getattr(config, f.name)
        out[f.name] = list(v) if isinstance(v, tuple) else v
    return out


def config_from_dict(config_cls, data: Mapping[str, Any]):
    """Rebuild a config from :func:`config_to_dict`'s JSON form (lists back to tuples). A field the
    saved form lacks takes ``Config.ABSENT[field]`` when declared (what configs written before the
    field existed meant), else its default."""
    data = {renamed_field(config_cls, k): v for k, v in data.items()}
    data = {**{k: v for k, v in getattr(config_cls, "ABSENT", {}).items() if k not in data}, **data}
    kwargs = {}
    for f in dataclasses.fields(config_cls):
        if f.name in data:
            v = data[f.name]
            if isinstance(v, list):
                v = tuple(v)
            kwargs[f.name] = v
    config = config_cls(**kwargs)
    check_config(config)
    return config


def mlp_policy_layers(actor_params) -> list[tuple[Any, Any]]:
    """``[(kernel, bias), ...]`` of a ``DeterministicActor`` / ``GaussianActor``'s mean path.

    Both nets compute ``tanh(Dense(relu(... relu(Dense(s)))))`` for the deterministic action;
    the hidden layers live under ``MLP_0`` and the mean head is the first top-level ``Dense``.
    """
    params = actor_params["params"] if "params" in actor_params else actor_params
    mlp = params["MLP_0"]
    hidden = [mlp[f"Dense_{i}"] for i in range(len(mlp))]
    head = params["Dense_0"]
    return [(layer["kernel"], layer["bias"]) for layer in (*hidden, head)]
