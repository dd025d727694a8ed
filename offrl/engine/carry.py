"""The offline -> online optimiser rule (:func:`carry_over`), apart from the online learner so that
loading a fine-tuning run (:func:`offrl.engine.load_run`) needs nothing else from the engine."""

from __future__ import annotations

import numpy as np


def carry_over(fresh, trained, warmup_updates: int):
    """``fresh``'s structure (the online config's agents) with ``trained``'s parameters and optimiser state.

    Every ``TrainState`` keeps the trained parameters, step and optimiser state. Where the online
    config changes an optimiser's structure (it drops a learning-rate schedule, e.g. IQL's cosine
    decay of the actor's rate), the Adam moments (``mu``, ``nu`` and their count) still carry over,
    and the step size of online update ``k = 0, 1, ...`` is

        eta_k = eta_off + (eta - eta_off) * min(1, k / warmup_updates)

    where ``eta_off`` is the rate the offline schedule would apply at its next step (0 for a cosine
    decayed to its end) and ``eta`` the online config's constant rate: a linear warm-up from where
    the offline schedule stopped (``warmup_updates = 0``: ``eta`` at once). ``eta_off / eta`` is read
    off the two optimisers by applying both to the same gradient from the same moments (Adam's
    step is linear in its rate). ``trained`` may be a restored pytree of arrays (seed-stacked).
    """
    from flax.training.train_state import TrainState

    changes = {}
    for name in fresh.__dataclass_fields__:
        if name == "config":
            continue
        new, old = getattr(fresh, name), getattr(trained, name)
        changes[name] = _carry_state(new, old, warmup_updates) if isinstance(new, TrainState) else old
    return fresh.replace(**changes)


def _is_adam(x) -> bool:
    import optax

    return isinstance(x, optax.ScaleByAdamState)


def _carry_state(new, old, warmup_updates: int):
    import jax
    import jax.numpy as jnp
    import optax

    if jax.tree_util.tree_structure(new.opt_state) == jax.tree_util.tree_structure(old.opt_state):
        return new.replace(params=old.params, step=old.step, opt_state=old.opt_state)
    moments = [x for x in jax.tree_util.tree_leaves(old.opt_state, is_leaf=_is_adam) if _is_adam(x)]
    slots = [x for x in jax.tree_util.tree_leaves(new.opt_state, is_leaf=_is_adam) if _is_adam(x)]
    if len(moments) != len(slots):
        raise ValueError(f"cannot carry the optimiser state over: {len(moments)} Adam states offline, {len(slots)} online")
    source = iter(moments)
    opt_state = jax.tree_util.tree_map(lambda x: next(source) if _is_adam(x) else x, new.opt_state, is_leaf=_is_adam)
    ratio = _rate_ratio(old.tx, old.opt_state, new.tx, opt_state, old.params)
    tx, count = new.tx, jnp.zeros(np.asarray(old.step).shape, jnp.int32)
    if warmup_updates > 0:
        width = float(warmup_updates)
        warmup = optax.scale_by_schedule(lambda k: ratio + (1.0 - ratio) * jnp.minimum(1.0, k / width))
        tx, opt_state = optax.chain(new.tx, warmup), (opt_state, optax.ScaleByScheduleState(count=count))
    return new.replace(params=old.params, step=old.step, tx=tx, opt_state=opt_state)


def _rate_ratio(old_tx, old_state, new_tx, new_state, params) -> float:
    """``eta_off / eta``: the offline optimiser's next step over the online one's, for one gradient."""
    import jax
    import jax.numpy as jnp

    first = lambda tree: jax.tree_util.tree_map(lambda x: jnp.asarray(x)[0], tree)  # noqa: E731  (seed 0)
    params = first(params)
    grads = jax.tree_util.tree_map(jnp.ones_like, params)
    old_update, _ = old_tx.update(grads, first(old_state), params)
    new_update, _ = new_tx.update(grads, first(new_state), params)
    dot = lambda a, b: sum(jnp.vdot(x, y) for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)))  # noqa: E731
    return float(dot(old_update, new_update) / dot(new_update, new_update))
