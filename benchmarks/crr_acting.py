"""Does CRR's acting rule explain a score gap between offrl and d3rlpy?

offrl's CRR acts with the policy mean; d3rlpy 2.8's draws ``m`` actions from the policy and picks
one with probabilities ``softmax(Q)``. This script evaluates a finished CRR run (a run folder or a
benchmark cell folder, with its last checkpoint) under both rules, on the same evaluation seeds:

    python benchmarks/crr_acting.py benchmarks/results/.../cells/walker2d-medium-crr --episodes 10

It prints each seed's normalized score under both rules and their means. The committed cell
folders keep no checkpoints; rerun the cell first with
``offrl benchmark --envs ENV --tiers TIER --algos crr --budget cpu --seeds 3 --out DIR`` (same
seeds, same file: the same scores).
"""

from __future__ import annotations

import argparse
import dataclasses
import json

import jax
import jax.numpy as jnp


def softmax_q_action(agent, observation: jax.Array, key: jax.Array, m: int = 4) -> jax.Array:
    """d3rlpy's CRR action for one observation: ``m`` policy samples (clipped to the action box),
    one drawn with probabilities ``softmax(Q(s, a_j))`` under the online critic (min over its heads)."""
    from offrl.algos import crr

    mean, log_std = agent.actor.apply_fn(agent.actor.params, observation[None])
    sample_key, choice_key = jax.random.split(key)
    candidates = crr.sample_actions(sample_key, jnp.broadcast_to(mean, (m, mean.shape[-1])),
                                    jnp.broadcast_to(log_std, (m, mean.shape[-1])))
    q = agent.critic.apply_fn(agent.critic.params, jnp.broadcast_to(observation, (m, observation.shape[-1])), candidates).min(0)
    return candidates[jax.random.categorical(choice_key, q)]


def compare(folder: str, episodes: int = 10, m: int = 4) -> dict[str, list[float]]:
    """Per-seed normalized scores of the run under offrl's rule (``"mean"``) and d3rlpy's (``"softmax_q"``)."""
    from offrl.algos import crr
    from offrl.algos.planning import PlanningPolicy
    from offrl.engine.run import evaluate, load_run

    run = load_run(folder)
    if run.algo != "crr":
        raise SystemExit(f"error: {folder} is a '{run.algo}' run; this script compares CRR's acting rules, pass a CRR run.")
    scores = {"mean": [r["eval/normalized_score"] for r in evaluate(run, episodes=episodes)["per_seed"]]}
    spec = crr.SPEC
    plan = lambda agent, obs, key: softmax_q_action(agent, obs, key, m)  # noqa: E731
    crr.SPEC = dataclasses.replace(spec, rollout_policy=lambda agents, info, seeds, envs_per_seed: (PlanningPolicy(plan, info, seeds), None))
    try:
        scores["softmax_q"] = [r["eval/normalized_score"] for r in evaluate(run, episodes=episodes)["per_seed"]]
    finally:
        crr.SPEC = spec
    return scores


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", help="a CRR run folder or benchmark cell folder with a checkpoint")
    parser.add_argument("--episodes", type=int, default=10)
    parser.add_argument("--m", type=int, default=4, help="policy samples per action under the softmax rule (d3rlpy: 4)")
    args = parser.parse_args(argv)
    scores = compare(args.run, args.episodes, args.m)
    for rule, values in scores.items():
        print(f"{rule:10s} per seed {[round(v, 1) for v in values]}  mean {sum(values) / len(values):.1f}")
    print(json.dumps(scores))


if __name__ == "__main__":
    main()
