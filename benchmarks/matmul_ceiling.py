"""How close an algorithm's update runs to the matmul rate its own shapes allow on this CPU.

``benchmarks/throughput.py`` reports an update's FLOP/s as a share of a 2048 x 2048 float32
matmul's rate. An update is made of smaller products (CQL's are 7,936 x 256 by 256 x 256, batched
over 2 critics; BCQ's 2,560 x 750 by 750 x 750), which run below that square matmul's rate even
alone. This script separates the two questions:

1. every ``dot_general`` of the update's jaxpr (the backward passes included: ``update`` takes its
   own gradients) is timed **alone**, jitted, at its own shapes and dimension numbers (best of
   several calls, less the dispatch time of a jitted no-op); their sum, each times its count, is
   the time the update would take if everything but its matmuls cost nothing;
2. the update itself is timed (a jitted loop of updates on one batch, one seed).

It prints the update's FLOPs (XLA's count), its rate and share of the square-matmul peak, the
matmul-only ceiling (FLOPs / the summed dot time) and its share of the peak, and the update's
share of that ceiling. Run on an idle machine (check ``uptime``)::

    PYTHONPATH=. python benchmarks/matmul_ceiling.py --algos cql,bcq,td3_bc,iql

The ceiling means something only for updates made of large products (CQL, BCQ, BEAR: each of
their main dots takes milliseconds). A product of a few hundred rows timed alone pays a fixed
cost (dispatch, waking the thread pool) that a program of many products does not, so for TD3+BC,
IQL, ReBRAC or PLAS the summed dots take longer than the whole update, and the script says "no
ceiling" instead of printing one.

Sizes are throughput.py's (``OFFRL_OVERRIDES``: 256 x 256 networks, batch 256, HalfCheetah-shaped
observations 17 and actions 6); SAC-N's and EDAC's are ``ensemble_speed.py``'s (10 critics of 3 x 256,
batch 256, hopper's observations 11 and actions 3); ``dynamics`` is one gradient step of the
dynamics ensemble at ``model_based_speed.py``'s sizes (7 members of 4 x 200, 256 rows each). A dot inside a ``scan`` or ``while`` body is counted once per
trip when the trip count is static (``scan``), once otherwise (``while``; none of these updates
loops over its matmuls); both branches of a ``cond`` are counted, which over-counts the dots of
an update that picks one (TD3's delayed actor step: use ``--step`` to say which).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax.extend import core as jex_core  # noqa: E402

from throughput import OFFRL_OVERRIDES, matmul_peak_flops  # noqa: E402

OBS_DIM, ACTION_DIM = 17, 6

# SAC-N and EDAC at ensemble_speed.py's sizes (its peer is the PyTorch reference, not d3rlpy):
# N = 10 critics of 3 x 256, batch 256, on hopper-medium-20k-v0's shapes (observations 11, actions 3)
OVERRIDES = {**OFFRL_OVERRIDES,
             "sac_n": {"hidden_dims": (256, 256, 256), "num_qs": 10, "batch_size": 256},
             "edac": {"hidden_dims": (256, 256, 256), "num_qs": 10, "batch_size": 256, "diversity_weight": 1.0}}
SHAPES = {"sac_n": (11, 3), "edac": (11, 3)}  # (observation, action) dims where not OBS_DIM, ACTION_DIM


def _subjaxprs(eqn):
    """(jaxpr, multiplicity) of every sub-program of ``eqn``."""
    mult = eqn.params.get("length", 1) if eqn.primitive.name == "scan" else 1
    for value in eqn.params.values():
        for item in value if isinstance(value, (list, tuple)) else (value,):
            if isinstance(item, jex_core.ClosedJaxpr):
                yield item.jaxpr, mult
            elif isinstance(item, jex_core.Jaxpr):
                yield item, mult


def collect_dots(jaxpr, mult: int = 1, found: Counter | None = None) -> Counter:
    """``Counter`` of ``(lhs shape, lhs dtype, rhs shape, rhs dtype, dimension numbers) -> count``."""
    found = Counter() if found is None else found
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "dot_general":
            lhs, rhs = (v.aval for v in eqn.invars)
            key = (tuple(lhs.shape), lhs.dtype, tuple(rhs.shape), rhs.dtype, eqn.params["dimension_numbers"])
            found[key] += mult
        for sub, m in _subjaxprs(eqn):
            collect_dots(sub, mult * m, found)
    return found


def dot_flops(lhs_shape, rhs_shape, dims) -> float:
    (lc, _rc), (lb, _rb) = dims
    batch = 1
    for d in lb:
        batch *= lhs_shape[d]
    contract = 1
    for d in lc:
        contract *= lhs_shape[d]
    lhs_free = 1
    for i, n in enumerate(lhs_shape):
        if i not in lc and i not in lb:
            lhs_free *= n
    rhs_free = 1
    rc, rb = dims[0][1], dims[1][1]
    for i, n in enumerate(rhs_shape):
        if i not in rc and i not in rb:
            rhs_free *= n
    return 2.0 * batch * contract * lhs_free * rhs_free


def dispatch_seconds(repeats: int = 200) -> float:
    """Best seconds of a jitted call that does nothing (subtracted from each dot's time)."""
    f = jax.jit(lambda x: x + 1.0)
    x = jnp.zeros((4,))
    f(x).block_until_ready()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        f(x).block_until_ready()
        best = min(best, time.perf_counter() - t0)
    return best


def time_dot(lhs_shape, lhs_dtype, rhs_shape, rhs_dtype, dims, repeats: int, overhead: float) -> float:
    """Best seconds of one jitted ``dot_general`` at these shapes, less a no-op call's dispatch."""
    lhs = jax.random.normal(jax.random.PRNGKey(0), lhs_shape, lhs_dtype)
    rhs = jax.random.normal(jax.random.PRNGKey(1), rhs_shape, rhs_dtype)
    f = jax.jit(lambda a, b: jax.lax.dot_general(a, b, dims))
    f(lhs, rhs).block_until_ready()
    best = float("inf")
    for _ in range(max(repeats, 10)):
        t0 = time.perf_counter()
        f(lhs, rhs).block_until_ready()
        best = min(best, time.perf_counter() - t0)
    return max(best - overhead, 0.0)


def make_agent_and_batch(name: str):
    from offrl.algos import get_algorithm
    from offrl.algos.common import Batch, apply_overrides

    module = get_algorithm(name)
    config = apply_overrides(module.Config(), OVERRIDES[name])
    B = config.batch_size
    obs_dim, action_dim = SHAPES.get(name, (OBS_DIM, ACTION_DIM))
    agent = module.create(config, obs_dim, action_dim, jax.random.PRNGKey(0))
    k = jax.random.split(jax.random.PRNGKey(1), 4)
    batch = Batch(observations=jax.random.normal(k[0], (B, obs_dim)),
                  actions=jax.random.uniform(k[1], (B, action_dim), minval=-1.0, maxval=1.0),
                  rewards=jax.random.normal(k[2], (B,)), masks=jnp.ones((B,)),
                  next_observations=jax.random.normal(k[3], (B, obs_dim)))
    return module, agent, batch


def make_dynamics_step():
    """One gradient step of the model-based algorithms' dynamics ensemble, as
    :func:`offrl.dynamics.fit_epochs` takes it (the loss's gradient and Adam), at
    ``model_based_speed.py``'s sizes: 7 members of 4 x 200 swish, 256 rows per member, Hopper's
    observations 11 and actions 3. Returns ``(update, state, batch)`` with ``update(state, batch)``
    a pair whose first item is the next state, as an algorithm's ``update``."""
    import optax

    from offrl import dynamics as dyn

    settings = dyn.DynamicsSettings()
    obs_dim, action_dim, rows = 11, 3, 256
    model = dyn.init_dynamics(settings, obs_dim, action_dim, jax.random.PRNGKey(0))
    net, tx, M = model.net, dyn._optimizer(settings), settings.ensemble_size
    k = jax.random.split(jax.random.PRNGKey(1), 3)
    batch = (jax.random.normal(k[0], (M, rows, obs_dim + action_dim)), jax.random.normal(k[1], (M, rows, obs_dim + 1)),
             (jax.random.uniform(k[2], (M, rows)) < 0.01).astype(jnp.float32))

    def update(state, batch):
        params, opt_state = state
        grads, aux = jax.grad(dyn.model_loss, has_aux=True)(params, net, *batch, settings.model_weight_decay)
        updates, opt_state = tx.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state), aux

    return update, (model.params, model.opt_state), batch


def measure(name: str, updates: int, repeats: int) -> dict:
    if name == "dynamics":
        update, agent, batch = make_dynamics_step()
    else:
        module, agent, batch = make_agent_and_batch(name)
        update = module.update
    analysis = jax.jit(update).lower(agent, batch).compile().cost_analysis()
    analysis = analysis[0] if isinstance(analysis, (list, tuple)) else analysis
    flops = float(analysis["flops"])

    loop = jax.jit(lambda a, b: jax.lax.fori_loop(0, updates, lambda i, x: update(x, b)[0], a))
    state = loop(agent, batch)
    jax.block_until_ready(state)
    update_s = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        state = loop(state, batch)
        jax.block_until_ready(state)
        update_s = min(update_s, (time.perf_counter() - t0) / updates)

    dots = collect_dots(jax.make_jaxpr(update)(agent, batch).jaxpr)
    rows, dot_s, dot_fl = [], 0.0, 0.0
    overhead = dispatch_seconds()
    for (ls, ld, rs, rd, dims), count in dots.items():
        seconds = time_dot(ls, ld, rs, rd, dims, repeats, overhead)
        fl = dot_flops(ls, rs, dims)
        rows.append({"lhs": ls, "rhs": rs, "dims": repr(dims), "count": count, "gflop": fl / 1e9,
                     "ms": seconds * 1e3, "gflops": fl / seconds / 1e9 if seconds > 0 else float("inf")})
        dot_s += count * seconds
        dot_fl += count * fl
    rows.sort(key=lambda r: -r["count"] * r["ms"])
    return {"algo": name, "gflop_per_update": flops / 1e9, "dot_gflop_per_update": dot_fl / 1e9,
            "dispatch_ms": overhead * 1e3,
            "update_ms": update_s * 1e3, "updates_per_s": 1.0 / update_s, "dot_only_ms": dot_s * 1e3,
            "dots": rows}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--algos", default="cql,bcq,td3_bc,iql", help="comma-separated, from throughput.py's OFFRL_OVERRIDES, or sac_n, edac, "
                   "dynamics (a gradient step of the model-based algorithms' dynamics ensemble)")
    p.add_argument("--updates", type=int, default=0, help="updates per timed loop (default: about 2 s of work)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--peak-size", type=int, default=2048)
    p.add_argument("--json", help="write the measurements here")
    args = p.parse_args(argv)
    names = [a.strip() for a in args.algos.split(",") if a.strip()]
    unknown = sorted(set(names) - set(OVERRIDES) - {"dynamics"})
    if unknown:
        p.error(f"--algos: unknown {', '.join(unknown)}; choose from {', '.join(OVERRIDES)}, dynamics")
    peak = matmul_peak_flops(args.peak_size)
    print(f"float32 matmul peak ({args.peak_size}^2, jitted): {peak / 1e9:.1f} GFLOP/s", flush=True)
    results = []
    for name in names:
        updates = args.updates or {"cql": 30, "bcq": 40, "bear": 20, "plas": 40, "sac_n": 40, "edac": 30, "dynamics": 100}.get(name, 400)
        r = measure(name, updates, args.repeats)
        gflops = r["gflop_per_update"] / r["update_ms"] * 1e3
        ceiling = r["gflop_per_update"] / r["dot_only_ms"] * 1e3
        r.update(peak_gflops=peak / 1e9, update_gflops=gflops, ceiling_gflops=ceiling)
        results.append(r)
        head = (f"{name}: {r['gflop_per_update']:.3f} GFLOP/update (dots {r['dot_gflop_per_update']:.3f}), "
                f"{r['updates_per_s']:.1f} updates/s = {gflops:.0f} GFLOP/s = {gflops * 1e9 / peak:.0%} of the peak; "
                f"its dots alone take {r['dot_only_ms']:.1f} of its {r['update_ms']:.1f} ms")
        if r["dot_only_ms"] >= r["update_ms"]:
            r["ceiling_gflops"] = None  # small products: each timed alone pays a fixed cost that a program of many does not
            print(f"{head}: no ceiling (its products are too small to be timed one at a time)", flush=True)
        else:
            print(f"{head}: ceiling {ceiling:.0f} GFLOP/s = {ceiling * 1e9 / peak:.0%} of the peak; the update runs at "
                  f"{r['dot_only_ms'] / r['update_ms']:.0%} of its ceiling", flush=True)
        for d in r["dots"][:6]:
            print(f"    {d['count']:3d} x {d['lhs']} . {d['rhs']}  {d['gflop']:.3f} GFLOP  {d['ms']:.2f} ms  "
                  f"{d['gflops']:.0f} GFLOP/s")
    peak_end = matmul_peak_flops(args.peak_size, repeats=2)
    print(f"peak at the end: {peak_end / 1e9:.1f} GFLOP/s", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"peak_gflops": peak / 1e9, "peak_end_gflops": peak_end / 1e9,
                                               "results": results}, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
