"""Train and evaluate one benchmark cell with d3rlpy; run by a *separate* Python (``--peer-python``).

``offrl benchmark --peer d3rlpy`` writes a request (JSON) and calls::

    PEER_PYTHON offrl/peers/d3rlpy_driver.py REQUEST.json

This file imports neither offrl nor JAX: only numpy, h5py, gymnasium and d3rlpy (2.x), so it
runs in a virtualenv that has d3rlpy and nothing of ours. It reads the D4RL-layout HDF5 file
(``observations, actions, rewards, terminals, timeouts``), builds d3rlpy's algorithm (bc, bcq,
cql, iql, td3, td3_bc, awac, rebrac, crr, bear or plas) with the sizes of offrl's resolved
config (the request's ``config``: hidden sizes, learning rates, batch size, discount, target
rate, critics, the algorithm's own coefficients, observation normalization and the same reward
multiplier), trains ``steps`` updates per seed (seeds one after another), evaluates d3rlpy's
greedy policy (``predict``) every ``eval_every`` updates for ``eval_episodes`` Gymnasium
episodes, and prints one JSON object on stdout::

    {"last_mean", "last_std", "best_mean", "best_std", "last_step", "best_step", "metric",
     "wall_s", "curve": [[step, mean, std], ...], "per_seed_last": [...], "unmatched": [...],
     "d3rlpy_version"}

Scores are normalized with the request's ``references`` (``100 (R - R_random) / (R_expert -
R_random)``); mean ± std over seeds (population std, as offrl's table). ``unmatched`` names each
offrl setting d3rlpy has no counterpart for, and each way d3rlpy's algorithm departs from
offrl's that no setting controls (how CRR and BEAR act, BEAR's MMD, PLAS's warm-up). PyTorch
runs ``torch_threads`` intra-op threads (default 1: on a small shared CPU more threads
oversubscribe it; see benchmarks/README.md).
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np


def load_arrays(path: str) -> dict:
    import h5py

    with h5py.File(path, "r") as f:
        out = {k: np.asarray(f[k]) for k in ("observations", "actions", "rewards", "terminals", "timeouts")}
    return out


def build_algo(name: str, cfg: dict, steps: int, reward_multiplier: float, low, high):
    """d3rlpy's algorithm with offrl's sizes; returns ``(algo, unmatched settings)``."""
    import d3rlpy
    from d3rlpy.models import VectorEncoderFactory
    from d3rlpy.optimizers import AdamFactory
    from d3rlpy.optimizers.lr_schedulers import CosineAnnealingLRFactory
    from d3rlpy.preprocessing import MinMaxActionScaler, MultiplyRewardScaler, StandardObservationScaler

    unmatched = []
    mlp = lambda dims: VectorEncoderFactory(hidden_units=list(dims))  # noqa: E731
    common = {"action_scaler": MinMaxActionScaler(minimum=np.asarray(low, np.float32), maximum=np.asarray(high, np.float32))}
    if cfg.get("normalize_observations"):
        common["observation_scaler"] = StandardObservationScaler()
    if reward_multiplier != 1.0:
        common["reward_scaler"] = MultiplyRewardScaler(multiplier=float(reward_multiplier))
    if float(cfg.get("reward_bias", 0.0) or 0.0) != 0.0:
        unmatched.append(f"reward_bias={cfg['reward_bias']}")
    rl = {"gamma": cfg.get("discount", 0.99), "tau": cfg.get("tau", 0.005), "n_critics": cfg.get("num_qs", 2),
          "batch_size": cfg["batch_size"]}
    if name == "bc":
        if cfg.get("loss", "mse") != "mse":
            unmatched.append(f"loss={cfg['loss']} (d3rlpy's stochastic BC used)")
        config = d3rlpy.algos.BCConfig(batch_size=cfg["batch_size"], learning_rate=cfg["learning_rate"],
                                       policy_type="deterministic" if cfg.get("loss", "mse") == "mse" else "stochastic",
                                       encoder_factory=mlp(cfg["hidden_dims"]), **common)
    elif name == "td3_bc":
        for key in ("bc_anneal_steps",):
            if cfg.get(key):
                unmatched.append(f"{key}={cfg[key]}")
        config = d3rlpy.algos.TD3PlusBCConfig(
            actor_learning_rate=cfg["actor_lr"], critic_learning_rate=cfg["critic_lr"],
            actor_encoder_factory=mlp(cfg["hidden_dims"]), critic_encoder_factory=mlp(cfg["hidden_dims"]),
            target_smoothing_sigma=cfg["policy_noise"], target_smoothing_clip=cfg["noise_clip"], alpha=cfg["alpha"],
            update_actor_interval=cfg["policy_delay"], **rl, **common)
    elif name == "td3":
        config = d3rlpy.algos.TD3Config(
            actor_learning_rate=cfg["actor_lr"], critic_learning_rate=cfg["critic_lr"],
            actor_encoder_factory=mlp(cfg["hidden_dims"]), critic_encoder_factory=mlp(cfg["hidden_dims"]),
            target_smoothing_sigma=cfg["policy_noise"], target_smoothing_clip=cfg["noise_clip"],
            update_actor_interval=cfg["policy_delay"], **rl, **common)
    elif name == "iql":
        actor_optim = AdamFactory()
        if cfg.get("cosine_actor_lr"):
            actor_optim = AdamFactory(lr_scheduler_factory=CosineAnnealingLRFactory(T_max=int(cfg.get("schedule_steps") or steps)))
        config = d3rlpy.algos.IQLConfig(
            actor_learning_rate=cfg["actor_lr"], critic_learning_rate=cfg["critic_lr"], actor_optim_factory=actor_optim,
            actor_encoder_factory=mlp(cfg["hidden_dims"]), critic_encoder_factory=mlp(cfg["hidden_dims"]),
            value_encoder_factory=mlp(cfg["hidden_dims"]), expectile=cfg["expectile"],
            weight_temp=cfg["awr_inverse_temperature"], max_weight=cfg["max_weight"], **rl, **common)
        if cfg.get("value_lr") != cfg.get("critic_lr"):
            unmatched.append(f"value_lr={cfg.get('value_lr')} (d3rlpy trains V with the critic's rate)")
    elif name == "cql":
        if cfg.get("lagrange"):
            alpha = {"alpha_learning_rate": cfg["cql_alpha_lr"], "alpha_threshold": cfg["target_action_gap"]}
        else:
            alpha = {"alpha_learning_rate": 0.0}
        if cfg.get("bc_warmup_steps"):
            unmatched.append(f"bc_warmup_steps={cfg['bc_warmup_steps']} (d3rlpy's CQL has no BC warm-up)")
        if not cfg.get("importance_sampling", True):
            unmatched.append("importance_sampling=False")
        config = d3rlpy.algos.CQLConfig(
            actor_learning_rate=cfg["actor_lr"], critic_learning_rate=cfg["critic_lr"],
            temp_learning_rate=cfg["entropy_alpha_lr"], initial_temperature=cfg["initial_entropy_alpha"],
            actor_encoder_factory=mlp(cfg["hidden_dims"]), critic_encoder_factory=mlp(cfg["hidden_dims"]),
            conservative_weight=cfg["cql_alpha"], n_action_samples=cfg["n_actions"], initial_alpha=1.0,
            **alpha, **rl, **common)
    elif name == "bcq":
        config = d3rlpy.algos.BCQConfig(
            actor_learning_rate=cfg["actor_lr"], critic_learning_rate=cfg["critic_lr"], imitator_learning_rate=cfg["vae_lr"],
            actor_encoder_factory=mlp(cfg["hidden_dims"]), critic_encoder_factory=mlp(cfg["hidden_dims"]),
            imitator_encoder_factory=mlp(cfg["vae_hidden_dims"]), lam=cfg["lmbda"], action_flexibility=cfg["phi"],
            n_action_samples=cfg["num_samples"], beta=cfg["kl_weight"], **rl, **common)
        if cfg.get("latent_dim") is not None:
            unmatched.append(f"latent_dim={cfg['latent_dim']} (d3rlpy uses 2 x action_dim)")
    elif name == "awac":
        config = d3rlpy.algos.AWACConfig(
            actor_learning_rate=cfg["actor_lr"], critic_learning_rate=cfg["critic_lr"],
            actor_optim_factory=AdamFactory(weight_decay=cfg.get("actor_weight_decay", 0.0)),
            actor_encoder_factory=mlp(cfg["actor_hidden_dims"]), critic_encoder_factory=mlp(cfg["hidden_dims"]),
            lam=cfg["lam"], **rl, **common)
        if not cfg.get("normalize_weights", True) or cfg.get("max_weight") not in (None, 100.0):
            unmatched.append("AWAC weight normalisation/clipping")
    elif name == "rebrac":
        if not cfg.get("normalize_q", True):
            unmatched.append("normalize_q=False (d3rlpy always divides the actor's Q by mean|Q|)")
        # both sum the BC terms over action dimensions and put beta on the BC term, lambda = 1/mean|Q| on Q;
        # d3rlpy's LayerNorm follows the ReLU (as the authors'), offrl's precedes it
        config = d3rlpy.algos.ReBRACConfig(
            actor_learning_rate=cfg["actor_lr"], critic_learning_rate=cfg["critic_lr"],
            actor_encoder_factory=mlp(cfg["hidden_dims"]),
            critic_encoder_factory=VectorEncoderFactory(hidden_units=list(cfg["hidden_dims"]),
                                                        use_layer_norm=bool(cfg.get("critic_layer_norm", True))),
            target_smoothing_sigma=cfg["policy_noise"], target_smoothing_clip=cfg["noise_clip"],
            update_actor_interval=cfg["policy_delay"], actor_beta=cfg["actor_bc_weight"], critic_beta=cfg["critic_bc_weight"],
            **rl, **common)
    elif name == "crr":
        hard = cfg.get("target_update_interval") is not None
        # beta divides the advantage in both (exp(A / beta)): offrl's advantage_temperature, not an inverse one
        config = d3rlpy.algos.CRRConfig(
            actor_learning_rate=cfg["actor_lr"], critic_learning_rate=cfg["critic_lr"],
            actor_encoder_factory=mlp(cfg["hidden_dims"]), critic_encoder_factory=mlp(cfg["hidden_dims"]),
            beta=cfg["advantage_temperature"], n_action_samples=cfg["num_action_samples"], advantage_type=cfg["advantage_type"],
            weight_type=cfg["weight_type"], max_weight=cfg["max_weight"], target_update_type="hard" if hard else "soft",
            target_update_interval=int(cfg["target_update_interval"]) if hard else 1, **rl, **common)
        if cfg.get("num_qs", 1) > 1:
            unmatched.append(f"num_qs={cfg['num_qs']} in the advantage (d3rlpy averages the critics, offrl takes their min)")
        if cfg.get("log_std_min", -20.0) != -20.0:
            unmatched.append(f"log_std_min={cfg['log_std_min']} (d3rlpy's policy log-std floor is -20)")
        if not cfg.get("advantage_after_critic_step", True):
            unmatched.append("advantage before the critic step (d3rlpy weights the actor with the critic after it)")
        unmatched.append("act (d3rlpy resamples m policy actions by softmax Q, offrl acts with the policy mean)")
    elif name == "bear":
        # d3rlpy's BEAR is SAC's actor plus the MMD; offrl's has no entropy term, so the temperature is held at ~0
        config = d3rlpy.algos.BEARConfig(
            actor_learning_rate=cfg["actor_lr"], critic_learning_rate=cfg["critic_lr"], imitator_learning_rate=cfg["vae_lr"],
            alpha_learning_rate=cfg["alpha_lr"], temp_learning_rate=0.0, initial_temperature=1e-20,
            actor_encoder_factory=mlp(cfg["hidden_dims"]), critic_encoder_factory=mlp(cfg["hidden_dims"]),
            imitator_encoder_factory=mlp(cfg["vae_hidden_dims"]), vae_kl_weight=cfg["kl_weight"], lam=cfg["lmbda"],
            n_target_samples=cfg["num_target_samples"], n_mmd_action_samples=cfg["num_mmd_samples"],
            mmd_kernel=cfg["mmd_kernel"], mmd_sigma=cfg["mmd_sigma"], alpha_threshold=cfg["mmd_epsilon"],
            initial_alpha=cfg["initial_alpha"], warmup_steps=cfg["warmup_steps"], **rl, **common)
        if cfg["alpha_lr"] != cfg["actor_lr"]:
            unmatched.append(f"alpha_lr={cfg['alpha_lr']} (d3rlpy 2.8.1 steps log alpha at actor_learning_rate)")
        if cfg.get("latent_dim") is not None:
            unmatched.append(f"latent_dim={cfg['latent_dim']} (d3rlpy uses 2 x action_dim)")
        if cfg["warmup_steps"] > 0:
            unmatched.append("alpha during the warm-up (d3rlpy holds it at initial_alpha, offrl learns it)")
        if steps > cfg["warmup_steps"]:
            # its alpha step back-propagates -MMD into the policy too, so the policy's net MMD gradient is 0
            unmatched.append("MMD after the warm-up (d3rlpy 2.8.1's alpha step cancels the MMD's gradient in the policy)")
        unmatched.append("MMD on pre-tanh samples in d3rlpy (as the authors'), on actions in offrl")
        unmatched.append("act (d3rlpy takes the best of 100 policy samples by Q, offrl acts with tanh(mean))")
    elif name == "plas":
        config = d3rlpy.algos.PLASConfig(
            actor_learning_rate=cfg["actor_lr"], critic_learning_rate=cfg["critic_lr"], imitator_learning_rate=cfg["vae_lr"],
            actor_encoder_factory=mlp(cfg["hidden_dims"]), critic_encoder_factory=mlp(cfg["hidden_dims"]),
            imitator_encoder_factory=mlp(cfg["vae_hidden_dims"]), lam=cfg["lmbda"], beta=cfg["kl_weight"],
            warmup_steps=cfg["warmup_steps"], **rl, **common)
        if cfg.get("max_latent_action", 2.0) != 2.0:
            unmatched.append(f"max_latent_action={cfg['max_latent_action']} (d3rlpy's is 2)")
        if cfg.get("latent_dim") is not None:
            unmatched.append(f"latent_dim={cfg['latent_dim']} (d3rlpy uses 2 x action_dim)")
        if cfg["warmup_steps"] > 0 and cfg.get("critic_during_warmup", True):
            unmatched.append("critic during the warm-up (d3rlpy trains only the VAE, offrl the critic too; "
                             "critic_during_warmup=false matches it)")
    else:
        raise SystemExit(f"the d3rlpy driver has no mapping for algorithm '{name}'; "
                         f"it knows bc, bcq, cql, iql, td3, td3_bc, awac, rebrac, crr, bear, plas.")
    return config.create(device="cpu:0"), unmatched


def evaluate(algo, env, episodes: int, seed: int) -> list[float]:
    """Episode returns of d3rlpy's greedy policy. This driver runs in the peer's own Python,
    which has no offrl, so it cannot use ``offrl.rollout`` and steps the env itself
    (one episode per reset seed ``seed + i``, ending on terminated or truncated)."""
    returns = []
    for i in range(episodes):
        obs, _ = env.reset(seed=seed + i)
        total, done = 0.0, False
        while not done:
            action = algo.predict(np.asarray(obs, np.float32)[None])[0]
            obs, reward, terminated, truncated, _ = env.step(action)
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
    return returns


def run(request: dict) -> dict:
    import d3rlpy
    import gymnasium as gym
    import torch
    from d3rlpy.logging import NoopAdapterFactory

    torch.set_num_threads(int(request.get("torch_threads", 1)))
    data = load_arrays(request["dataset_path"])
    steps, every, episodes = int(request["steps"]), int(request["eval_every"]), int(request["eval_episodes"])
    r_lo, r_hi = request["references"]
    score = lambda r: 100.0 * (np.asarray(r) - r_lo) / (r_hi - r_lo)  # noqa: E731
    env = gym.make(request["env_id"])
    low, high = env.action_space.low, env.action_space.high
    t0 = time.perf_counter()
    curves, unmatched = [], []
    for s in range(int(request["seeds"])):
        seed = int(request["seed"]) + s
        d3rlpy.seed(seed)
        dataset = d3rlpy.dataset.MDPDataset(
            data["observations"].astype(np.float32), data["actions"].astype(np.float32), data["rewards"].astype(np.float32),
            data["terminals"].astype(np.float32), data["timeouts"].astype(np.float32),
            action_space=d3rlpy.ActionSpace.CONTINUOUS)
        algo, unmatched = build_algo(request["algo"], request["config"], steps, float(request.get("reward_multiplier", 1.0)), low, high)
        curve = []
        for epoch, _ in algo.fitter(dataset, n_steps=steps, n_steps_per_epoch=every, show_progress=False,
                                    logger_adapter=NoopAdapterFactory(), save_interval=10 ** 9):
            curve.append(float(np.mean(score(evaluate(algo, env, episodes, seed=10_000 * (seed + 1) + epoch)))))
        curves.append(curve)
    wall = time.perf_counter() - t0
    table = np.asarray(curves)                 # (seeds, evaluations)
    mean, std = table.mean(0), table.std(0)
    eval_steps = [every * (i + 1) for i in range(table.shape[1])]
    best = int(np.argmax(mean))
    return {"metric": "eval/normalized_score", "last_step": eval_steps[-1], "last_mean": float(mean[-1]), "last_std": float(std[-1]),
            "best_step": eval_steps[best], "best_mean": float(mean[best]), "best_std": float(std[best]), "wall_s": wall,
            "curve": [[st, float(m), float(sd)] for st, m, sd in zip(eval_steps, mean, std)],
            "per_seed_last": [float(c[-1]) for c in curves], "unmatched": unmatched, "d3rlpy_version": d3rlpy.__version__}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python d3rlpy_driver.py REQUEST.json", file=sys.stderr)
        return 2
    with open(argv[0]) as fh:
        request = json.load(fh)
    result = run(request)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
