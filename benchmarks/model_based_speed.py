"""offrl's model-based path against a PyTorch MOPO, side by side in one process: dynamics-ensemble
training, MOPO (SAC) updates and model rollouts.

The peer is ``benchmarks/peers/mopo_torch.py`` (a single-file PyTorch MOPO following OfflineRL-Kit's);
``--kit PATH`` also times OfflineRL-Kit's own classes, imported from a source snapshot at ``PATH``
(the folder holding ``offlinerlkit/``; it imports without D4RL but needs ``gym==0.24.1`` and
``tensorboard``). Every side trains on the same synthetic Hopper-shaped data (obs 11, action 3,
``--transitions`` rows, no terminals) with the same sizes: 7 members / 5 elites of 4 x 200 swish,
model minibatch 256 per member; SAC 2 x 256, two critics, batch 256 with 5% real rows; rollouts of
horizon 5 from 50,000 dataset states with the stochastic actor in the loop, penalty 1. The
termination function is "never" on every side, so every row lives for the whole horizon and the
sides step the same number of transitions (OfflineRL-Kit drops terminated rows, offrl masks them).

What is timed, per round (each side in turn, rounds alternating, the median round reported):

(a) dynamics training: one epoch of the fit, i.e. every minibatch gradient step over the training
    split (each step: all members, 256 rows each) plus the held-out scores and the 1% rule.
    offrl: :func:`offrl.dynamics.fit_epochs` with ``max_epochs=1`` (jitted; the same function the
    fit inside MOPO's update loops over). Rate: gradient steps / s.
(b) MOPO updates on a mixed real/model batch, the model fitted and the buffer filled beforehand.
    offrl: the engine's scanned chunk (:class:`offrl.engine.chunks.Trainer`) of ``mopo.update``,
    with ``rollout_every`` past the run so that no refill falls inside a timed chunk (the fit and
    the first refill run in the untimed first chunk, ``model_max_epochs=1``). Peer: its loop body,
    sample real + model rows, then one update. Rate: updates / s.
(c) model rollouts: one refill, i.e. draw the start states, roll the policy out ``--horizon`` steps
    in the model, add the rows to the model buffer. offrl: :func:`offrl.algos.model_based.refill`
    (jitted, the agent donated as inside the training chunk). Rate: model transitions / s.

Both sides also report this process's CPU seconds per round (a second number that a shared
machine's load moves less). Torch uses its default thread count unless ``--torch-threads N``.
For (a) and (b) it prints offrl's achieved FLOP/s (XLA's count of one model step / one SAC update
times the rate) as a share of a jitted float32 matmul's, and the share that 3x the best peer
would need: above 100% the target exceeds what this CPU can do.

Run (on an idle machine: other processes' load changes both sides)::

    python benchmarks/model_based_speed.py --json benchmarks/results/model-based-speed.json
    python benchmarks/model_based_speed.py --kit /path/to/OfflineRL-Kit      # also OfflineRL-Kit itself
    python benchmarks/model_based_speed.py --quick          # tiny sizes: only checks the script runs
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent / "peers"))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # throughput.matmul_peak_flops

OBS_DIM, ACTION_DIM = 11, 3


def synthetic_data(n: int, seed: int = 0):
    """Hopper-shaped transitions: ``s' = s + 0.05 tanh(s A + a B) + noise``, ``r`` a smooth function of ``(s, a)``."""
    rng = np.random.default_rng(seed)
    obs = rng.standard_normal((n, OBS_DIM)).astype(np.float32)
    actions = rng.uniform(-1.0, 1.0, (n, ACTION_DIM)).astype(np.float32)
    a_mat = rng.standard_normal((OBS_DIM, OBS_DIM)) / math.sqrt(OBS_DIM)
    b_mat = rng.standard_normal((ACTION_DIM, OBS_DIM)) / math.sqrt(ACTION_DIM)
    next_obs = (obs + 0.05 * np.tanh(obs @ a_mat + actions @ b_mat)
                + 0.01 * rng.standard_normal((n, OBS_DIM))).astype(np.float32)
    rewards = (np.tanh(obs[:, 0]) - 0.1 * (actions ** 2).sum(-1)).astype(np.float32)
    return obs, actions, rewards, next_obs, np.zeros(n, np.float32)


# ---------------------------------------------------------------------- offrl's side


class Offrl:
    """offrl's real code paths on device-resident data."""

    def __init__(self, arrays, args):
        import jax

        from offrl import dynamics as dyn
        from offrl.algos import algorithm_spec, get_algorithm, model_based
        from offrl.data import Dataset
        from offrl.engine.chunks import Trainer, create_agents, unstack
        from offrl.engine.data import data_info, prepare_data
        from offrl.engine.training import run_config

        obs, actions, rewards, next_obs, terminals = arrays
        self.module = get_algorithm("mopo")
        overrides = {"hidden_dims": ",".join([str(args.hidden)] * 2), "model_hidden_dims": ",".join(["200"] * 4),
                     "batch_size": str(args.batch_size), "rollout_starts": str(args.rollout_starts),
                     "rollout_length": str(args.horizon), "rollout_every": str(10 ** 9), "model_max_epochs": "1",
                     "model_patience": str(10 ** 9), "termination": "none", "penalty_coef": "1.0",
                     "critic_layer_norm": str(args.critic_layer_norm).lower()}
        config = run_config(self.module, overrides, 1_000_000)
        dataset = Dataset.from_arrays(obs, actions, rewards, terminals.astype(bool), next_observations=next_obs)
        config = algorithm_spec(self.module).config_for_dataset(config, dataset, data_info(dataset, config))
        self.config = config
        self.data, info = prepare_data(dataset, config, None, self.module)
        self.agents, self.data_keys = create_agents(self.module, config, info.obs_dim, info.action_dim, 0, 1)
        self.trainer = Trainer(self.module, config.batch_size, 1)
        self.jax, self.dyn, self.unstack = jax, dyn, unstack
        self.model_based = model_based

        # (a) runs epoch after epoch: no epoch cap there (the MOPO chunk's fit keeps model_max_epochs=1)
        model = unstack(self.agents).dynamics
        model = model.replace(settings=dataclasses.replace(model.settings, model_max_epochs=None))
        self.model = model
        self.fit_state = dyn.fit_begin(model, self.data, jax.random.PRNGKey(1))
        self.steps_per_epoch = self.fit_state.train_idx.shape[0] // min(config.model_batch_size,
                                                                           self.fit_state.train_idx.shape[0])
        self._epoch = jax.jit(lambda m, st, d: dyn.fit_epochs(m, st, d, max_epochs=1))
        self._refill = jax.jit(model_based.refill, donate_argnums=0)
        self.rollout_agent = None

    def flops(self) -> dict[str, float]:
        """XLA's FLOP counts of one model gradient step (``grad`` of :func:`offrl.dynamics.model_loss` on
        ``(M, batch, .)`` rows, Adam left out) and one SAC update on a mixed batch
        (:func:`offrl.algos.model_based.sac_update` with SAC's soft target: ``mopo.update`` without
        its fit/refill branches, which the cost analysis would count although they do not run)."""
        jax, dyn = self.jax, self.dyn
        from offrl.algos import sac
        from offrl.algos.common import Batch

        def count(fn, *args) -> float:
            analysis = jax.jit(fn).lower(*args).compile().cost_analysis()
            analysis = analysis[0] if isinstance(analysis, (list, tuple)) else analysis
            return float(analysis.get("flops", float("nan")))

        s, m = self.model.settings, self.model
        inputs, targets, terminals = dyn.model_arrays(self.data)
        rows = jax.numpy.arange(s.ensemble_size * s.model_batch_size).reshape(s.ensemble_size, -1) % inputs.shape[0]
        step = count(lambda p, x, y, t: jax.grad(dyn.model_loss, has_aux=True)(p, m.net, x, y, t, s.model_weight_decay),
                     m.params, inputs[rows], targets[rows], terminals[rows])
        agent = self.unstack(self.agents)
        batch = Batch.from_rows({k: v[: self.config.batch_size] for k, v in self.data.items()})

        def sac_step(agent, batch):
            key = jax.random.PRNGKey(0)
            return self.model_based.sac_update(agent, batch, sac.soft_target(agent, batch, key), key)

        return {"dynamics": step, "mopo": count(sac_step, agent, batch)}

    # (a)
    def fit_epoch(self) -> int:
        before = int(self.fit_state.count)
        self.fit_state = self._epoch(self.model, self.fit_state, self.data)
        self.jax.block_until_ready(self.fit_state)
        if int(self.fit_state.count) != before + 1:
            raise RuntimeError("offrl's fit stopped early; model_patience should keep it running")
        return self.steps_per_epoch

    # (b)
    def mopo_updates(self, k: int) -> int:
        self.agents, metrics = self.trainer.run(self.agents, self.data_keys, self.data, k)
        self.jax.block_until_ready((self.agents, metrics))
        if not bool(np.isfinite(np.asarray(metrics["critic_loss"])).all()):
            raise RuntimeError("offrl's MOPO critic loss is not finite")
        return k

    # (c)
    def refill(self) -> int:
        if self.rollout_agent is None:
            self.rollout_agent = self.unstack(self.agents)  # a copy: donating it leaves self.agents intact
        before = int(self.rollout_agent.buffer.pointer)
        self.rollout_agent = self._refill(self.rollout_agent, self.data)
        self.jax.block_until_ready(self.rollout_agent)
        # the ring holds 5 rollouts, so one rollout's rows never wrap the pointer all the way round
        return (int(self.rollout_agent.buffer.pointer) - before) % self.rollout_agent.buffer.capacity


# ---------------------------------------------------------------------- the peers


class Reference:
    """``benchmarks/peers/mopo_torch.py``."""

    name = "torch reference"

    def __init__(self, arrays, args):
        from mopo_torch import MOPO, EnsembleDynamics, ReplayBuffer

        obs, actions, rewards, next_obs, terminals = arrays
        self.real = ReplayBuffer.of(obs, actions, rewards, next_obs, terminals)
        self.fit_model = EnsembleDynamics(OBS_DIM, ACTION_DIM, batch_size=args.batch_size, seed=1)
        self.fit_model.begin_fit(obs, actions, rewards, next_obs)
        model = EnsembleDynamics(OBS_DIM, ACTION_DIM, batch_size=args.batch_size, penalty_coef=1.0, seed=2)
        model.begin_fit(obs, actions, rewards, next_obs)
        model.fit_epoch()
        model.end_fit()
        self.agent = MOPO(OBS_DIM, ACTION_DIM, model, hidden=(args.hidden, args.hidden),
                          rollout_starts=args.rollout_starts, horizon=args.horizon,
                          critic_layer_norm=args.critic_layer_norm)
        self.args = args
        self.agent.refill(self.real, args.rollout_starts, args.horizon)

    def fit_epoch(self) -> int:
        return self.fit_model.fit_epoch()["steps"]

    def mopo_updates(self, k: int) -> int:
        for _ in range(k):
            self.agent.update(*self.agent.mixed_batch(self.real, self.args.batch_size))
        return k

    def refill(self) -> int:
        return self.agent.refill(self.real, self.args.rollout_starts, self.args.horizon)


class Kit:
    """OfflineRL-Kit's own modules from a source snapshot; the loop bodies of its
    ``EnsembleDynamics.train`` (without the logger) and of ``MBPolicyTrainer.train``."""

    name = "OfflineRL-Kit"

    def __init__(self, arrays, args):
        import torch

        sys.path.insert(0, str(Path(args.kit).resolve()))
        from mopo_torch import KIT_WEIGHT_DECAYS, never_terminal
        from offlinerlkit.buffer import ReplayBuffer
        from offlinerlkit.dynamics import EnsembleDynamics
        from offlinerlkit.modules import ActorProb, Critic, EnsembleDynamicsModel, TanhDiagGaussian
        from offlinerlkit.nets import MLP
        from offlinerlkit.policy import MOPOPolicy
        from offlinerlkit.utils.scaler import StandardScaler

        obs, actions, rewards, next_obs, terminals = arrays
        data = {"observations": obs, "actions": actions, "rewards": rewards.reshape(-1, 1),
                "next_observations": next_obs, "terminals": terminals.reshape(-1, 1)}
        torch.manual_seed(0)
        np.random.seed(0)

        def dynamics():
            model = EnsembleDynamicsModel(OBS_DIM, ACTION_DIM, [200] * 4, 7, 5, weight_decays=list(KIT_WEIGHT_DECAYS))
            return EnsembleDynamics(model, torch.optim.Adam(model.parameters(), lr=1e-3), StandardScaler(),
                                    never_terminal, penalty_coef=1.0)

        # (a): the state of EnsembleDynamics.train before its epoch loop
        self.fit_dyn = dynamics()
        inputs, targets = self.fit_dyn.format_samples_for_training(data)
        n = inputs.shape[0]
        held = min(int(n * 0.2), 1000)
        order = np.random.permutation(n)
        train, hold = order[: n - held], order[n - held:]
        self.fit_dyn.scaler.fit(inputs[train])
        self.train_inputs, self.train_targets = self.fit_dyn.scaler.transform(inputs[train]), targets[train]
        self.hold_inputs, self.hold_targets = self.fit_dyn.scaler.transform(inputs[hold]), targets[hold]
        self.best = [1e10] * 7
        self.idx = np.random.randint(n - held, size=[7, n - held])
        self.batch_size = args.batch_size

        # (b), (c): MOPOPolicy as run_example/run_mopo.py builds it
        dyn = dynamics()
        dyn.scaler.fit(inputs)
        hidden = [args.hidden, args.hidden]
        actor = ActorProb(MLP(OBS_DIM, hidden), TanhDiagGaussian(hidden[-1], ACTION_DIM, unbounded=True,
                                                                  conditioned_sigma=True, max_mu=1.0))
        critics = [Critic(MLP(OBS_DIM + ACTION_DIM, hidden)) for _ in range(2)]
        log_alpha = torch.zeros(1, requires_grad=True)
        self.policy = MOPOPolicy(dyn, actor, critics[0], critics[1], torch.optim.Adam(actor.parameters(), lr=1e-4),
                                 torch.optim.Adam(critics[0].parameters(), lr=3e-4),
                                 torch.optim.Adam(critics[1].parameters(), lr=3e-4),
                                 alpha=(-float(ACTION_DIM), log_alpha, torch.optim.Adam([log_alpha], lr=1e-4)))
        self.real = ReplayBuffer(n, (OBS_DIM,), np.float32, ACTION_DIM, np.float32)
        self.real.load_dataset(data)
        self.fake = ReplayBuffer(args.rollout_starts * args.horizon * 5, (OBS_DIM,), np.float32, ACTION_DIM, np.float32)
        self.args = args
        self.refill()

    def fit_epoch(self) -> int:
        self.fit_dyn.learn(self.train_inputs[self.idx], self.train_targets[self.idx], self.batch_size, 0.01)
        losses = self.fit_dyn.validate(self.hold_inputs, self.hold_targets)
        keys = np.random.uniform(size=self.idx.shape)
        self.idx = self.idx[np.arange(self.idx.shape[0])[:, None], np.argsort(keys, axis=-1)]
        better = [i for i, (new, old) in enumerate(zip(losses, self.best)) if (old - new) / old > 0.01]
        for i in better:
            self.best[i] = losses[i]
        if better:
            self.fit_dyn.model.update_save(better)
        return math.ceil(self.idx.shape[1] / self.batch_size)

    def mopo_updates(self, k: int) -> int:
        n_real = int(self.args.batch_size * 0.05)
        for _ in range(k):
            self.policy.learn({"real": self.real.sample(n_real), "fake": self.fake.sample(self.args.batch_size - n_real)})
        return k

    def refill(self) -> int:
        starts = self.real.sample(self.args.rollout_starts)["observations"].cpu().numpy()
        traj, info = self.policy.rollout(starts, self.args.horizon)
        self.fake.add_batch(**traj)
        return info["num_transitions"]


# ---------------------------------------------------------------------- timing


def timed(fn) -> tuple[float, float, int]:
    t0, c0 = time.perf_counter(), time.process_time()
    units = fn()
    return time.perf_counter() - t0, time.process_time() - c0, units


def measure(sides: dict, call: dict, rounds: int) -> dict:
    """Rounds alternating over the sides; per side the median rate (units / wall s) and CPU s per round."""
    per = {name: [] for name in sides}
    for _ in range(rounds):
        for name in sides:
            wall, cpu, units = timed(call[name])
            per[name].append((units / wall, cpu, units))
    return {name: {"rate": statistics.median(r for r, _, _ in rows), "cpu_s_per_round": statistics.median(c for _, c, _ in rows),
                   "units_per_round": rows[-1][2], "rates": [r for r, _, _ in rows]} for name, rows in per.items()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transitions", type=int, default=100_000, help="synthetic rows (default 100,000)")
    parser.add_argument("--hidden", type=int, default=256, help="SAC's widths, 2 layers (default 256)")
    parser.add_argument("--batch-size", type=int, default=256, help="model rows per member and SAC batch (default 256)")
    parser.add_argument("--rollout-starts", type=int, default=50_000, help="start states of a rollout (default 50,000)")
    parser.add_argument("--horizon", type=int, default=5, help="rollout length (default 5)")
    parser.add_argument("--updates", type=int, default=1000, help="offrl MOPO updates per round, one chunk (default 1000)")
    parser.add_argument("--peer-updates", type=int, default=None, help="peer MOPO updates per round (default updates / 5)")
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds per section (default 5)")
    parser.add_argument("--sections", default="dynamics,mopo,rollout", help="any of dynamics,mopo,rollout")
    parser.add_argument("--critic-layer-norm", action="store_true", help="LayerNorm in the critics on both sides "
                        "(offrl's MOPO default; OfflineRL-Kit has none, so off here unless set; --kit ignores it)")
    parser.add_argument("--kit", default=None, help="folder holding OfflineRL-Kit's offlinerlkit/ package: time it too")
    parser.add_argument("--torch-threads", type=int, default=None, help="torch.set_num_threads (default: torch's own)")
    parser.add_argument("--peak-size", type=int, default=2048, help="matrix size of the matmul peak (default 2048; --quick 512)")
    parser.add_argument("--json", default=None, help="write the figures as JSON to this file")
    parser.add_argument("--quick", action="store_true", help="tiny sizes (3,000 rows, 1,000 starts, 10 updates, "
                        "2 rounds): only checks the script runs")
    args = parser.parse_args(argv)
    from offrl.errors import ConfigError

    sections = args.sections.split(",")
    bad = [s for s in sections if s not in ("dynamics", "mopo", "rollout")]
    if bad:
        raise ConfigError(f"--sections: unknown section(s) {', '.join(bad)}; choose from dynamics,mopo,rollout.")
    if args.quick:
        args.transitions, args.rollout_starts, args.updates, args.rounds, args.peak_size = 3000, 1000, 10, 2, 512
        args.peer_updates = args.peer_updates or 5
    if args.peer_updates is None:
        args.peer_updates = max(1, args.updates // 5)
    for flag in ("transitions", "hidden", "batch_size", "rollout_starts", "horizon", "updates", "peer_updates", "rounds",
                 "peak_size"):
        if getattr(args, flag) < 1:
            raise ConfigError(f"--{flag.replace('_', '-')} is {getattr(args, flag)}; it must be at least 1.")
    if args.transitions < 10:
        raise ConfigError(f"--transitions is {args.transitions}; the held-out split needs at least 10 rows.")
    if args.kit is not None and not (Path(args.kit) / "offlinerlkit").is_dir():
        raise ConfigError(f"--kit {args.kit}: no offlinerlkit/ folder there; pass the root of an OfflineRL-Kit checkout.")

    import torch

    if args.torch_threads is not None:
        torch.set_num_threads(args.torch_threads)
    arrays = synthetic_data(args.transitions)
    load_before = os.getloadavg()
    t0 = time.perf_counter()
    ours = Offrl(arrays, args)
    peers = {"torch reference": Reference(arrays, args)}
    if args.kit is not None:
        peers["OfflineRL-Kit"] = Kit(arrays, args)
    setup_s = time.perf_counter() - t0

    sides = {"offrl": ours, **peers}
    results, compile_s = {}, {}
    if "dynamics" in sections:
        # two untimed epochs: the second call compiles again, because fit_begin's `best` is weakly typed
        # and the first epoch returns it strongly typed
        compile_s["dynamics"] = timed(ours.fit_epoch)[0] + timed(ours.fit_epoch)[0]
        for peer in peers.values():
            peer.fit_epoch()
        results["dynamics"] = measure(sides, {n: s.fit_epoch for n, s in sides.items()}, args.rounds)
    if "mopo" in sections:
        compile_s["mopo"] = timed(lambda: ours.mopo_updates(args.updates))[0]  # step 0: fit (1 epoch) + refill + compile
        calls = {"offrl": lambda: ours.mopo_updates(args.updates)}
        for name, peer in peers.items():
            peer.mopo_updates(2)
            calls[name] = (lambda p: lambda: p.mopo_updates(args.peer_updates))(peer)
        results["mopo"] = measure(sides, calls, args.rounds)
    if "rollout" in sections:
        compile_s["rollout"] = timed(ours.refill)[0]
        results["rollout"] = measure(sides, {n: s.refill for n, s in sides.items()}, args.rounds)
    load_after = os.getloadavg()
    flops = ours.flops()
    from throughput import matmul_peak_flops

    peak = matmul_peak_flops(args.peak_size)

    units = {"dynamics": "grad steps/s", "mopo": "updates/s", "rollout": "transitions/s"}
    what = {"dynamics": f"(a) dynamics training, 7 x 4 x 200, {args.batch_size} rows/member/step",
            "mopo": f"(b) MOPO (SAC 2 x {args.hidden}) updates, batch {args.batch_size}, 5% real",
            "rollout": f"(c) model rollouts, {args.rollout_starts:,} starts x horizon {args.horizon}, actor in the loop"}
    print(f"synthetic Hopper-shaped data: {args.transitions:,} transitions, obs {OBS_DIM}, action {ACTION_DIM}; "
          f"{args.rounds} alternating rounds per section, medians; torch threads {torch.get_num_threads()}, "
          f"{os.cpu_count()} CPUs; setup {setup_s:.1f} s")
    print(f"load average (1/5/15 min) before {load_before[0]:.2f}/{load_before[1]:.2f}/{load_before[2]:.2f}, "
          f"after {load_after[0]:.2f}/{load_after[1]:.2f}/{load_after[2]:.2f}")
    print(f"float32 matmul peak ({args.peak_size} x {args.peak_size}, jitted, measured after the rounds): "
          f"{peak / 1e9:.1f} GFLOP/s; XLA's count: {flops['dynamics'] / 1e9:.3f} GFLOP per model step, "
          f"{flops['mopo'] / 1e9:.3f} GFLOP per SAC update")
    rows = []
    for section, res in results.items():
        print(f"\n{what[section]}  (offrl compile + untimed first call(s) {compile_s[section]:.1f} s)")
        if section in flops:
            achieved = flops[section] * res["offrl"]["rate"]
            print(f"  offrl: {achieved / 1e9:.1f} GFLOP/s = {achieved / peak:.0%} of the matmul peak; "
                  f"3x the best peer would need {3 * flops[section] * max(r['rate'] for n, r in res.items() if n != 'offrl') / peak:.0%}")
        print(f"  {'side':<16} {units[section]:>14} {'cpu s/round':>12} {'per round':>10} {'offrl ratio':>12}")
        for name, r in res.items():
            ratio = res["offrl"]["rate"] / r["rate"]
            print(f"  {name:<16} {r['rate']:>14,.1f} {r['cpu_s_per_round']:>12.3f} {r['units_per_round']:>10,} "
                  f"{'' if name == 'offrl' else f'{ratio:.2f}x':>12}")
            if name != "offrl":
                rows.append({"section": section, "peer": name, "offrl_rate": res["offrl"]["rate"], "peer_rate": r["rate"],
                             "ratio": ratio, "unit": units[section]})
    if args.json:
        record = {"command": "python benchmarks/model_based_speed.py " + " ".join(sys.argv[1:] if argv is None else argv),
                  "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "load_before": load_before,
                  "load_after": load_after, "cpus": os.cpu_count(), "torch_threads": torch.get_num_threads(),
                  "settings": {k: v for k, v in vars(args).items() if k != "json"}, "compile_s": compile_s,
                  "matmul_peak_flops": peak, "offrl_flops": flops,
                  "sections": results, "ratios": rows}
        Path(args.json).write_text(json.dumps(record, indent=2))
    return 0


if __name__ == "__main__":
    from offrl.errors import ConfigError

    try:
        raise SystemExit(main())
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(2)
