"""Extrapolation error of naive offline Q-learning, and CQL's remedy (Fujimoto et al. 2019;
Kumar et al. 2020), for discrete and continuous actions.

Offline Q-learning bootstraps from ``max_a Q'(s', a)`` (DQN) or ``Q'(s', pi(s'))`` with ``pi``
trained to maximise ``Q`` (TD3). On narrow data the maximising action lies where nothing in the
data constrains ``Q``; its error feeds back through the bootstrap and the estimate runs away
while the policy, which now prefers the unconstrained action, does not realise it. CQL adds
``alpha * (logsumexp_a Q(s, a) - Q(s, a_data))`` (sampled actions for continuous ``a``) and its
estimate stays below the return it realises.

Two panels of the same experiment, each trained with the engine on one narrow dataset:

* discrete: naive offline DQN vs discrete CQL on the scripted CartPole expert's transitions
  (deterministic, so at every state only one action is ever logged);
* continuous: offline TD3 (no BC term) vs CQL on 10,000 Pendulum-v1 transitions of the bundled
  SAC zoo expert acting deterministically (:mod:`offrl.demos.experts`: one torque per state).
  Pendulum's rewards are ``<= 0``, so any ``Q > 0`` is pure extrapolation. Both critics use a
  faster target (``tau = 0.05``, critic learning rate ``1e-3``) than the defaults so that the
  bootstrap propagates within the demo's few thousand steps.

Each panel plots the extrapolation monitor: the critic's ``Q(s0, pi(s0))`` against the
discounted return realised from ``s0`` over training.

What the default settings show: the unregularised critics' estimates (DQN, offline TD3) climb
past any achievable value while their policies fall; CQL's stays below its realised return. The
continuous half uses CQL's penalty weight 20, since with the default 5 the estimate falls too
slowly to cross the realised return within the demo's steps. Neither continuous policy balances
the pendulum on this one-torque-per-state data: the demo shows the critics' error, not a good
policy. The seed-0 numbers are in benchmarks/README.md.
"""

from __future__ import annotations

from offrl.demos.common import ENV_ID, cartpole_expert, write_outputs

ALGOS = ("dqn", "discrete_cql")
CONTINUOUS_ALGOS = ("td3", "cql")
CONTINUOUS_ENV = "Pendulum-v1"
#: both continuous critics: a faster target than the defaults (see the module docstring)
CONTINUOUS_OVERRIDES = {"tau": 0.05, "critic_lr": 1e-3}
CONTINUOUS_CQL_ALPHA = 20.0  # the penalty weight that brings the estimate under the realised return within the demo


def continuous_expert_dataset(transitions: int = 10_000, num_envs: int = 10, seed: int = 0):
    """``transitions`` Pendulum-v1 steps of the bundled SAC expert, deterministic (narrow data)."""
    import jax

    from offrl.data import Dataset
    from offrl.demos.experts import load_expert
    from offrl.rollout import VectorEnv, collect_steps

    expert = load_expert("pendulum-sac")
    env = VectorEnv(CONTINUOUS_ENV, num_envs)
    try:
        arrays = collect_steps(env, lambda params, carry, obs, key: (expert(obs), carry), None,
                               [transitions // num_envs] * num_envs, seed, jax.random.PRNGKey(seed))
    finally:
        env.close()
    return Dataset.from_arrays(arrays["observations"], arrays["actions"], arrays["rewards"], arrays["terminals"],
                               arrays["timeouts"], arrays["next_observations"],
                               metadata={"env_id": CONTINUOUS_ENV, "action_low": expert.action_low.tolist(),
                                         "action_high": expert.action_high.tolist(),
                                         "generator": "bundled pendulum-sac expert, deterministic (offrl.demos.experts)"})


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


def train_curves(algos, ds, steps: int, eval_every: int, eval_episodes: int, seed: int, overrides: dict) -> dict:
    """The extrapolation monitor of each algorithm in ``algos`` trained on ``ds``."""
    from offrl.engine import train

    curves = {}
    for algo in algos:
        run_ = train(algo, ds, steps=steps, seed=seed, eval_every=eval_every, eval_episodes=eval_episodes,
                     log_every=eval_every, progress=False, config_overrides=overrides.get(algo, {}))
        evals = run_.evaluations()
        curves[algo] = {"step": [r["step"] for r in evals], "q_estimate": [r["eval/q_estimate"] for r in evals],
                        "discounted_return": [r["eval/discounted_return"] for r in evals],
                        "return": [r["eval/return"] for r in evals]}
    return curves


def verdict_line(naive: str, naive_curve: dict, cql: str, cql_curve: dict) -> str:
    """One line: how far each critic's final estimate sits from the discounted return its policy realised."""
    n, c = naive_curve, cql_curve
    gap_n = n["q_estimate"][-1] - n["discounted_return"][-1]
    gap_c = c["q_estimate"][-1] - c["discounted_return"][-1]
    return (f"naive {naive}'s estimate went from {n['q_estimate'][0]:.1f} to {n['q_estimate'][-1]:.1f} while its policy "
            f"realised {n['discounted_return'][-1]:.1f} (overestimate {gap_n:+.0f}, return {n['return'][-1]:.0f}); {cql}'s "
            f"ended at {c['q_estimate'][-1]:.1f} against its {c['discounted_return'][-1]:.1f} "
            f"({'below it' if gap_c <= 0 else f'overestimate {gap_c:+.0f}'}, return {c['return'][-1]:.0f}).")


def run(out="offrl-demo/extrapolation", steps: int = 4000, eval_every: int = 500, eval_episodes: int = 3,
        seed: int = 0, hidden_dims: str = "64,64", continuous_steps: int = 10000) -> dict:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ds = expert_dataset(seed=seed)
    curves = train_curves(ALGOS, ds, steps, eval_every, eval_episodes, seed, {a: {"hidden_dims": hidden_dims} for a in ALGOS})
    pendulum = continuous_expert_dataset(seed=seed)
    continuous_overrides = {"td3": {"hidden_dims": hidden_dims, **CONTINUOUS_OVERRIDES},  # alpha None: no BC term
                            "cql": {"hidden_dims": hidden_dims, "bc_warmup_steps": 0, "cql_alpha": CONTINUOUS_CQL_ALPHA,
                                    **CONTINUOUS_OVERRIDES}}
    continuous = train_curves(CONTINUOUS_ALGOS, pendulum, continuous_steps, max(continuous_steps // 8, 1), eval_episodes,
                              seed, continuous_overrides)

    fig, axes = plt.subplots(2, 2, figsize=(10, 7))
    panels = [(ALGOS, curves, f"{ENV_ID}, scripted expert, {len(ds)} transitions"),
              (CONTINUOUS_ALGOS, continuous, f"{CONTINUOUS_ENV}, zoo SAC expert, {len(pendulum)} transitions")]
    for row, (algos, family, what) in zip(axes, panels):
        for ax, algo in zip(row, algos):
            c = family[algo]
            ax.plot(c["step"], c["q_estimate"], "o-", label="critic: Q(s0, pi(s0))")
            ax.plot(c["step"], c["discounted_return"], "s--", label="realised discounted return")
            ax.set_yscale("symlog")
            ax.set_title(f"{algo} on {what.split(',')[0]} (final return {c['return'][-1]:.0f})", fontsize=9)
            ax.set_xlabel("gradient steps")
        row[0].set_ylabel(what, fontsize=8)
    for ax in axes[1]:
        ax.axhline(0.0, color="grey", lw=0.8, ls=":", label="best possible value (rewards <= 0)")
    for row in axes:
        row[0].legend(fontsize=8)
    fig.suptitle("Offline Q-learning on narrow data: naive (left) vs CQL (right)")
    fig.tight_layout()

    verdicts = {"discrete": verdict_line("offline DQN", curves["dqn"], "discrete CQL", curves["discrete_cql"]),
                "continuous": verdict_line("offline TD3", continuous["td3"], "CQL", continuous["cql"])}
    verdict = f"Discrete ({ENV_ID}): {verdicts['discrete']}\nContinuous (Pendulum-v1): {verdicts['continuous']}"
    result = {"env": ENV_ID, "transitions": len(ds), "curves": curves, "verdicts": verdicts, "verdict": verdict,
              "continuous": {"env": CONTINUOUS_ENV, "data": pendulum.metadata["generator"], "transitions": len(pendulum),
                             "overrides": CONTINUOUS_OVERRIDES, "curves": continuous},
              "settings": {"steps": steps, "continuous_steps": continuous_steps, "eval_every": eval_every,
                           "eval_episodes": eval_episodes, "seed": seed, "hidden_dims": hidden_dims}}
    result["files"] = write_outputs(out, "extrapolation", result, fig)
    return result
