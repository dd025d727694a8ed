"""Extrapolation error of naive offline Q-learning, and CQL's remedy (Fujimoto et al. 2019;
Kumar et al. 2020).

Offline DQN bootstraps from ``max_a Q'(s', a)``. On narrow data (here: the deterministic CartPole
expert, so at every state only one action is ever logged) the max ranges over actions whose
Q-values nothing in the data constrains; their errors feed back through the bootstrap and the
estimate runs away while the greedy policy, which now prefers the unconstrained action, fails.
Discrete CQL adds ``alpha * (logsumexp_a Q(s, a) - Q(s, a_data))`` and its estimate stays below the
return it realises. The demo trains both on the same data with the engine and plots the
extrapolation monitor: the critic's ``Q(s0, pi(s0))`` against the discounted return realised
from ``s0`` over training.
"""

from __future__ import annotations

from offrl.demos.common import ENV_ID, cartpole_expert, write_outputs

ALGOS = ("dqn", "discrete_cql")


def expert_dataset(episodes: int = 4, steps: int = 500, seed: int = 0):
    """``episodes`` x ``steps`` transitions of the scripted expert (every episode runs to the time limit)."""
    import jax

    from offrl.data import Dataset
    from offrl.rollout import VectorEnv, collect_steps

    env = VectorEnv(ENV_ID, episodes)
    try:
        arrays = collect_steps(env, lambda params, carry, obs, key: (cartpole_expert(obs)[:, None], carry), None,
                               [steps] * episodes, seed, jax.random.PRNGKey(seed))
    finally:
        env.close()
    return Dataset.from_arrays(arrays["observations"], arrays["actions"], arrays["rewards"], arrays["terminals"],
                               arrays["timeouts"], arrays["next_observations"],
                               metadata={"env_id": ENV_ID, "generator": "scripted CartPole expert (offrl.demos.common)"})


def run(out="offrl-demo/extrapolation", steps: int = 4000, eval_every: int = 500, eval_episodes: int = 3,
        seed: int = 0, hidden_dims: str = "64,64") -> dict:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from offrl.engine import train

    ds = expert_dataset(seed=seed)
    curves = {}
    for algo in ALGOS:
        run_ = train(algo, ds, steps=steps, seed=seed, eval_every=eval_every, eval_episodes=eval_episodes,
                     log_every=eval_every, progress=False, config_overrides={"hidden_dims": hidden_dims})
        evals = run_.evaluations()
        curves[algo] = {"step": [r["step"] for r in evals], "q_estimate": [r["eval/q_estimate"] for r in evals],
                        "discounted_return": [r["eval/discounted_return"] for r in evals],
                        "return": [r["eval/return"] for r in evals]}

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    for ax, algo in zip(axes, ALGOS):
        c = curves[algo]
        ax.plot(c["step"], c["q_estimate"], "o-", label="critic: Q(s0, pi(s0))")
        ax.plot(c["step"], c["discounted_return"], "s--", label="realised discounted return")
        ax.set_yscale("symlog")
        ax.set_title(f"{algo} (final return {c['return'][-1]:.0f})")
        ax.set_xlabel("gradient steps")
    axes[0].legend(fontsize=8)
    fig.suptitle(f"Offline Q-learning on narrow data ({ENV_ID}, scripted expert, {len(ds)} transitions)")

    dqn, cql = curves["dqn"], curves["discrete_cql"]
    verdict = (f"Naive offline DQN's estimate ran to {dqn['q_estimate'][-1]:.0f} while its policy realised "
               f"{dqn['discounted_return'][-1]:.1f} (return {dqn['return'][-1]:.0f}); discrete CQL's "
               f"{cql['q_estimate'][-1]:.1f} sat {'below' if cql['q_estimate'][-1] <= cql['discounted_return'][-1] else 'above'} "
               f"its {cql['discounted_return'][-1]:.1f} (return {cql['return'][-1]:.0f}).")
    result = {"env": ENV_ID, "transitions": len(ds), "curves": curves, "verdict": verdict,
              "settings": {"steps": steps, "eval_every": eval_every, "eval_episodes": eval_episodes, "seed": seed,
                           "hidden_dims": hidden_dims}}
    result["files"] = write_outputs(out, "extrapolation", result, fig)
    return result
