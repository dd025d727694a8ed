"""gymnax's jitted CartPole-v1 vs the Gymnasium env that offrl steps (``offrl.rollout``): same
dynamics? faster evaluation?

1. Dynamics: for each of ``--check-episodes`` start states, Gymnasium's CartPole-v1 is reset,
   its state copied into gymnax's ``EnvState`` and both are stepped with the same action sequence
   (uniformly random, seeded) until Gymnasium's episode ends; the script reports the largest
   absolute difference of the observations, whether rewards and terminations agree step by step
   (the 500-step time limit is Gymnasium's ``TimeLimit`` on one side and the caller's on the other),
   and the same over the scripted expert's closed loop (actions chosen from each env's own
   observations, so differences can feed back).
2. Speed: evaluating the scripted expert ``a = 1{theta + 0.5 theta_dot > 0}`` for ``E`` full
   episodes (500 steps each) from ``E`` start states: offrl's path (``offrl.rollout.VectorEnv`` +
   ``run_episodes``, the policy in NumPy) vs gymnax (``vmap`` over episodes, ``lax.scan`` over 500
   steps, policy inside jit). Reported as env-steps/s, median of ``--repeats`` after one warm-up
   (gymnax's compile time reported apart).

Run::

    python benchmarks/gymnax_cartpole.py --json benchmarks/results/gymnax-cartpole-<date>.json

gymnax is not an offrl dependency: ``pip install --no-deps gymnax`` (its own requirements would
move gymnasium from 1.4 to 1.3).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

STEPS = 500


def scripted_expert(obs):
    return (obs[..., 2] + 0.5 * obs[..., 3] > 0).astype(np.int64)


def gymnax_state(state_vec):
    import jax.numpy as jnp
    from gymnax.environments.classic_control.cartpole import EnvState

    x, x_dot, theta, theta_dot = (jnp.float32(v) for v in state_vec)
    return EnvState(x=x, x_dot=x_dot, theta=theta, theta_dot=theta_dot, time=0)


def compare_dynamics(episodes: int, seed: int) -> dict:
    """Open loop (random actions) and closed loop (the scripted expert) from the same start states."""
    import gymnasium as gym
    import jax
    import jax.numpy as jnp
    import gymnax

    genv, params = gymnax.make("CartPole-v1")
    step = jax.jit(lambda s, a: genv.step_env(jax.random.PRNGKey(0), s, a, params))
    rng = np.random.default_rng(seed)
    out = {}
    for mode in ("random actions", "scripted expert"):
        max_diff, reward_agree, done_agree, lengths, mismatches = 0.0, True, True, [], []
        for k in range(episodes):
            env = gym.make("CartPole-v1")
            obs, _ = env.reset(seed=seed + k)
            state = gymnax_state(env.unwrapped.state)
            gobs = np.asarray(genv.get_obs(state))
            max_diff = max(max_diff, float(np.abs(gobs - obs).max()))
            for t in range(STEPS):
                if mode == "random actions":
                    a = ga = int(rng.integers(2))
                else:
                    a, ga = int(scripted_expert(obs)), int(scripted_expert(gobs))
                obs, r, term, trunc, _ = env.step(a)
                gobs, state, gr, gdone, _ = step(state, jnp.int32(ga))
                gobs = np.asarray(gobs)
                max_diff = max(max_diff, float(np.abs(gobs - obs).max()))
                # gymnax pays the reward of a step from the *previous* state's terminal flag (1 here)
                reward_agree &= float(gr) == float(r)
                # gymnax's step_env has no time limit (its auto-resetting step does): compare terminations
                if bool(gdone) != bool(term):
                    done_agree = False
                    mismatches.append({"episode": k, "step": t + 1, "gymnasium": [bool(term), bool(trunc)], "gymnax": bool(gdone)})
                if term or trunc:
                    break
            lengths.append(t + 1)
            env.close()
        out[mode] = {"max_abs_obs_diff": max_diff, "rewards_agree": bool(reward_agree),
                     "termination_agrees": bool(done_agree), "mean_length": float(np.mean(lengths)),
                     "termination_mismatches": mismatches[:5]}
    return out


def offrl_eval(episodes: int, seed: int) -> tuple[float, float]:
    """``(seconds, mean return)`` of offrl.rollout evaluating the scripted expert."""
    import jax

    from offrl.rollout import VectorEnv, run_episodes

    t0 = time.perf_counter()
    env = VectorEnv("CartPole-v1", episodes)
    try:
        res = run_episodes(env, lambda p, c, obs, key: (scripted_expert(obs)[:, None], c), None,
                           [seed + k for k in range(episodes)], jax.random.PRNGKey(seed))
    finally:
        env.close()
    return time.perf_counter() - t0, float(np.mean(res["return"]))


def make_gymnax_eval(episodes: int):
    import jax
    import jax.numpy as jnp
    import gymnax

    genv, params = gymnax.make("CartPole-v1")

    def one_episode(key):
        obs, state = genv.reset_env(key, params)

        def body(carry, _):
            obs, state, ret, alive = carry
            a = (obs[2] + 0.5 * obs[3] > 0).astype(jnp.int32)
            obs, state, r, done, _ = genv.step_env(key, state, a, params)
            ret = ret + alive * 1.0  # CartPole pays 1 for every step taken while alive
            alive = alive * (1.0 - done.astype(jnp.float32)) * (state.time < params.max_steps_in_episode)
            return (obs, state, ret, alive), None

        (_, _, ret, _), _ = jax.lax.scan(body, (obs, state, 0.0, 1.0), None, length=STEPS)
        return ret

    return jax.jit(jax.vmap(one_episode)), episodes


def gymnax_eval(fn, episodes: int, seed: int) -> tuple[float, float]:
    import jax

    keys = jax.random.split(jax.random.PRNGKey(seed), episodes)
    t0 = time.perf_counter()
    returns = jax.block_until_ready(fn(keys))
    return time.perf_counter() - t0, float(np.mean(returns))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--episodes", default="10,100", help="comma-separated evaluation sizes (default 10,100)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--check-episodes", type=int, default=20)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    import jax

    from importlib.metadata import version

    print(f"gymnax {version('gymnax')}, jax {jax.__version__}, "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    dynamics = compare_dynamics(args.check_episodes, args.seed)
    for mode, d in dynamics.items():
        print(f"dynamics, {mode}: max |obs diff| {d['max_abs_obs_diff']:.2e}, rewards agree {d['rewards_agree']}, "
              f"termination agrees {d['termination_agrees']} (mean length {d['mean_length']:.0f})"
              + (f"; first mismatches {d['termination_mismatches']}" if d["termination_mismatches"] else ""))
    speed = []
    for episodes in [int(e) for e in args.episodes.split(",")]:
        offrl_eval(episodes, args.seed)  # warm-up (imports, env construction paths)
        fn, _ = make_gymnax_eval(episodes)
        compile_s, _ = gymnax_eval(fn, episodes, args.seed)
        ours, theirs = [], []
        for r in range(args.repeats):
            s, ret_o = offrl_eval(episodes, args.seed + r)
            ours.append(s)
            s, ret_g = gymnax_eval(fn, episodes, args.seed + r)
            theirs.append(s)
        row = {"episodes": episodes, "env_steps": episodes * STEPS,
               "offrl_rollout_s": statistics.median(ours), "gymnax_s": statistics.median(theirs),
               "gymnax_compile_and_first_s": compile_s, "offrl_mean_return": ret_o, "gymnax_mean_return": ret_g}
        row["offrl_env_steps_per_s"] = row["env_steps"] / row["offrl_rollout_s"]
        row["gymnax_env_steps_per_s"] = row["env_steps"] / row["gymnax_s"]
        row["speedup"] = row["offrl_rollout_s"] / row["gymnax_s"]
        speed.append(row)
        print(f"{episodes} episodes x {STEPS} steps: offrl.rollout {row['offrl_rollout_s']:.3f} s "
              f"({row['offrl_env_steps_per_s']:,.0f} steps/s), gymnax {row['gymnax_s']:.4f} s "
              f"({row['gymnax_env_steps_per_s']:,.0f} steps/s; compile + first call {compile_s:.2f} s): "
              f"{row['speedup']:.1f}x; mean returns {ret_o:.1f} / {ret_g:.1f}")
    print(f"load average now {os.getloadavg()[0]:.1f} (shared 2-core machine)")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"dynamics": dynamics, "speed": speed, "args": vars(args)}, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
