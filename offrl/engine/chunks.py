"""Compiled chunks: ``lax.scan`` over updates, ``vmap`` over seeds, data resident on the device.

One call of the jitted chunk function runs ``num_steps`` updates for every seed::

    for step in range(num_steps):                       # lax.scan
        key   = fold_in(data_key[seed], agent.step)       # sampling key derived from the state
        batch = sample(data, key, batch_size)             # the algorithm's sampler, on the device
        agent, metrics = algo.update(agent, batch)

so Python runs once per chunk and the only host transfer is the chunk's stacked metrics. Seeds
are vmapped on accelerators and run in a ``lax.map`` (one after another, still one program) on
a CPU backend, where batched small matrix products are slower than the same products one by one.
Because the sampling key depends on ``agent.step`` only, a run resumed from a checkpoint
draws exactly the minibatches the uninterrupted run would have drawn, and on CPU reproduces
its parameters bit for bit.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from offrl.engine.data import sampler

_CHUNK_FNS: dict[tuple, Any] = {}


def make_chunk_fn(module, num_steps: int, batch_size: int, vmap_seeds: bool, batch_sharding=None,
                  member_loop: bool = False):
    """``chunk(agents, data_keys, data) -> (agents, metrics)``: ``num_steps`` scanned updates.

    ``metrics[name]`` has shape ``(seeds, num_steps)`` (``(num_steps,)`` unvmapped). The
    jitted function is cached, so runs with the same algorithm and shapes in one process
    compile once. ``batch_sharding`` (one seed only) splits every minibatch's batch axis over
    devices (:mod:`offrl.engine.sharding`). ``member_loop`` runs the seeds one after another
    inside the compiled program (:func:`map_over_seeds`) instead of vmapped.
    """
    cache_key = (module.__name__, num_steps, batch_size, vmap_seeds, batch_sharding, member_loop)
    if cache_key not in _CHUNK_FNS:
        _CHUNK_FNS[cache_key] = _make_chunk_fn(module, num_steps, batch_size, vmap_seeds, batch_sharding, member_loop)
    return _CHUNK_FNS[cache_key]


def scan_updates(module, agent, data_key, data, num_steps: int, batch_size: int, batch_sharding=None):
    """``num_steps`` updates of one agent in a ``lax.scan`` (traceable; the body of every chunk)."""
    import jax

    sample = sampler(module)
    if batch_sharding is not None:
        from offrl.engine.sharding import constrain_batch

        draw = sample
        sample = lambda d, k, b: constrain_batch(draw(d, k, b), batch_sharding, b)  # noqa: E731

    def body(agent, _):
        batch = sample(data, jax.random.fold_in(data_key, agent.step), batch_size)
        return module.update(agent, batch)

    return jax.lax.scan(body, agent, None, length=num_steps)


def vmap_over_seeds(fn):
    """``wrapped(agents, per_seed, shared)`` calls ``fn(agent, *per_seed, *shared)`` vmapped over
    the seed-stacked ``agents`` and the tuple ``per_seed`` of batched arguments; ``shared`` (a
    tuple) enters unbatched. Returns ``(agents, outputs)``, both with a leading seed axis.

    Every seed is at the same step, so the step counter enters ``vmap`` unbatched: a
    branch on it inside an update (TD3's delayed actor step, :func:`offrl.algos.common.run_if`, or a
    ``lax.cond``) then stays a real branch instead of running both sides for every seed.
    """
    import jax
    import jax.numpy as jnp

    def wrapped(agents, per_seed: tuple, shared: tuple):
        axes = jax.tree_util.tree_map(lambda _: 0, agents).replace(step=None)
        out, extra = jax.vmap(lambda a, p, s: fn(a, *p, *s), in_axes=(axes, 0, None), out_axes=(axes, 0))(
            agents.replace(step=agents.step[0]), per_seed, shared)
        return out.replace(step=jnp.broadcast_to(out.step, agents.step.shape)), extra

    return wrapped


def map_over_seeds(fn):
    """Like :func:`vmap_over_seeds`, but the seeds run one after another in a ``lax.map`` inside
    the same compiled program: each seed's matrix products stay plain 2-D ones. XLA's CPU backend
    runs a batched (vmapped) product of many small matrices markedly slower than the same
    products one by one (``benchmarks/results/sweep-full-*.txt``), while an accelerator wants the
    batch. Each iteration sees one seed's scalar step, so a branch on it stays a branch."""
    import jax

    def wrapped(agents, per_seed: tuple, shared: tuple):
        return jax.lax.map(lambda a_p: fn(a_p[0], *a_p[1], *shared), (agents, per_seed))

    return wrapped


def member_loop_default(data_keys) -> bool:
    """Seeds in a ``lax.map`` on a CPU backend when they all live on one device; ``vmap`` on
    accelerators and when the seed axis is sharded over devices (each device's share vmapped)."""
    import jax

    sharding = getattr(data_keys, "sharding", None)
    one_device = sharding is None or len(sharding.device_set) == 1
    return jax.default_backend() == "cpu" and one_device


def _make_chunk_fn(module, num_steps: int, batch_size: int, vmap_seeds: bool, batch_sharding=None,
                   member_loop: bool = False):
    import jax

    def one_seed(agent, data_key, data):
        return scan_updates(module, agent, data_key, data, num_steps, batch_size, batch_sharding)

    if not vmap_seeds:
        return jax.jit(one_seed)
    seeds_fn = (map_over_seeds if member_loop else vmap_over_seeds)(one_seed)
    return jax.jit(lambda agents, data_keys, data: seeds_fn(agents, (data_keys,), (data,)))


def create_agents(module, config, obs_dim: int, action_dim: int, seed: int, seeds: int):
    """``(agents, data_keys)`` stacked over ``seeds``: seed ``i`` uses ``fold_in(PRNGKey(seed), i)``.

    The initialisers run as one compiled program (:func:`_compiled_create`), not op by op."""
    import jax

    keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.PRNGKey(seed), i))(np.arange(seeds))
    init_keys, data_keys = jax.vmap(lambda k: jax.random.split(k, 2))(keys).swapaxes(0, 1)
    create = None
    if not isinstance(init_keys, jax.core.Tracer):     # inside a caller's trace it is traced with it
        try:
            create = _compiled_create(module, config, obs_dim, action_dim)
        except TypeError:                               # a config that cannot be hashed: op by op
            pass
    if create is None:
        return jax.vmap(lambda k: module.create(config, obs_dim, action_dim, k))(init_keys), data_keys
    return create(init_keys), data_keys


@functools.lru_cache(maxsize=64)
def _compiled_create(module, config, obs_dim: int, action_dim: int):
    """``vmap(create)`` over init keys, jitted once per (module, config, dims). Op by op an agent's
    initialisers are 70-150 small programs, each compiled on first use (seconds per algorithm); as
    one program they compile once, at the lowest backend optimisation level (it runs once; the
    normal sampler's float contractions then differ from op by op, so a kernel can differ from an
    op-by-op ``create`` by a few 1e-6). Leaves come back strongly typed (a fresh agent's
    ``step`` would otherwise be weakly typed where a checkpoint's is not, and the training chunk
    would compile twice), and the same static parts (optimisers, apply functions) come back on
    every call, so one chunk program serves them all."""
    import jax
    import jax.numpy as jnp

    def init(keys):
        agents = jax.vmap(lambda k: module.create(config, obs_dim, action_dim, k))(keys)
        return jax.tree_util.tree_map(lambda x: jnp.asarray(x, x.dtype), agents)

    cpu = jax.default_backend() == "cpu"             # the option is the CPU compiler's; elsewhere the default
    return jax.jit(init, compiler_options={"xla_backend_optimization_level": 0} if cpu else None)


def unstack(tree, index: int = 0):
    """Seed ``index`` of a seed-stacked pytree."""
    import jax

    return jax.tree_util.tree_map(lambda x: x[index], tree)


def stack(tree):
    """A one-seed pytree with a leading seed axis of length 1 (Python scalars become arrays)."""
    import jax
    import jax.numpy as jnp

    return jax.tree_util.tree_map(lambda x: jnp.asarray(x)[None], tree)


class Trainer:
    """Runs scanned chunks for all seeds: ``members="auto"`` loops over them inside the program on
    a CPU backend (:func:`map_over_seeds`) and vmaps them elsewhere (:func:`vmap_over_seeds`,
    the shared step counter unbatched); ``"vmap"``/``"map"`` force one. One seed runs plain, its
    minibatches split over devices by ``batch_sharding``."""

    def __init__(self, module, batch_size: int, seeds: int, batch_sharding=None, members: str = "auto"):
        if members not in ("auto", "vmap", "map"):
            raise ValueError(f"members must be auto, vmap or map, not {members!r}")
        self.module, self.batch_size, self.seeds, self.members = module, batch_size, seeds, members
        self.batch_sharding = batch_sharding if seeds == 1 else None
        self._fns: dict[tuple, Any] = {}

    def run(self, agents, data_keys, data, num_steps: int):
        loop = self.members == "map" or (self.members == "auto" and self.seeds > 1 and member_loop_default(data_keys))
        fn = self._fns.get((num_steps, loop))
        if fn is None:
            fn = self._fns[(num_steps, loop)] = make_chunk_fn(self.module, num_steps, self.batch_size, self.seeds > 1,
                                                              self.batch_sharding, loop)
        if self.seeds > 1:
            return fn(agents, data_keys, data)
        agent, metrics = fn(unstack(agents), data_keys[0], data)
        return stack(agent), stack(metrics)
