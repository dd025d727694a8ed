"""Small trained experts shipped with offrl, for the demos that need an expert to query (DAgger).

Each expert is the best snapshot of a behaviour-policy zoo made by ``offrl collect
train-behavior`` (SAC for Pendulum-v1, double DQN for CartPole-v1), exported as a NumPy policy
(:mod:`offrl.policy`: ``policy.npz`` of plain arrays loaded with ``allow_pickle=False`` plus
``policy.json``): the SAC actor's deterministic action ``low + (tanh(mean(s)) + 1) (high - low) / 2``,
or the DQN's greedy ``argmax_a Q(s, a)``. ``offrl/datasets/build.sh`` rebuilds them::

    python -m offrl.demos.experts --zoo ZOO_DIR --out offrl/datasets/experts/NAME

Example::

    from offrl.demos.experts import load_expert
    expert = load_expert("pendulum-sac")      # NumpyPolicy: (B, 3) observations -> (B, 1) torques
    expert.meta["return_mean"]                # its measured deterministic return
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

EXPERTS_DIR = Path(__file__).resolve().parent.parent / "datasets" / "experts"
EXPERTS = {"pendulum-sac": "Pendulum-v1", "cartpole-dqn": "CartPole-v1"}


def load_expert(name: str):
    """The bundled expert ``name`` (one of :data:`EXPERTS`) as a :class:`offrl.policy.NumpyPolicy`."""
    from offrl.errors import ConfigError
    from offrl.policy import load_numpy_policy

    if name not in EXPERTS:
        raise ConfigError(f"unknown expert '{name}'; bundled experts: {', '.join(EXPERTS)}.")
    return load_numpy_policy(EXPERTS_DIR / name)


def best_snapshot(index: dict) -> dict:
    """The zoo snapshot with the highest deterministic evaluation return (then the highest
    stochastic one, then the earliest)."""
    snaps = [s for s in index["snapshots"] if s["step"] > 0]
    return max(snaps, key=lambda s: (s["deterministic_return_mean"], s["return_mean"], -s["step"]))


def export_expert(zoo_dir, out, step: int | None = None) -> Path:
    """Write the zoo's snapshot ``step`` (default: :func:`best_snapshot`) as a NumPy policy in ``out``."""
    from offrl.collect.zoo import load_policy, load_zoo_index
    from offrl.policy import save_numpy_policy

    index = load_zoo_index(zoo_dir)
    facts = best_snapshot(index) if step is None else next(s for s in index["snapshots"] if s["step"] == step)
    policy = load_policy(zoo_dir, int(facts["step"]))
    obs_dim = int(index["obs_dim"])
    meta = {"algo": index.get("algorithm", "SAC"), "env_id": index["env_id"], "obs_dim": obs_dim,
            "source": f"zoo snapshot step {facts['step']} (`offrl collect train-behavior`, zoo command: {index.get('command')})",
            "return_mean": float(facts["deterministic_return_mean"]), "returns": facts["deterministic_returns"]}
    n = int(index.get("num_actions", 0))
    if n:  # a discrete zoo: the greedy argmax of its Q-network
        from offrl.algos.discrete_common import head_layers

        layers = head_layers(policy.params, 0)
        meta.update(output_activation="argmax", num_actions=n, action_dim=n)
        low = high = np.zeros(1, np.float32)
    else:
        from offrl.algos.common import mlp_policy_layers

        layers = mlp_policy_layers(policy.params)
        meta.update(action_dim=int(index["action_dim"]))
        low, high = policy.action_low, policy.action_high
    layers = [(np.asarray(w), np.asarray(b)) for w, b in layers]
    return save_numpy_policy(out, layers, np.zeros(obs_dim), np.ones(obs_dim), low, high, meta)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description="Export a zoo's best snapshot as a bundled NumPy expert.")
    p.add_argument("--zoo", required=True, help="zoo folder made by `offrl collect train-behavior`")
    p.add_argument("--out", required=True, help="folder for policy.npz + policy.json")
    p.add_argument("--step", type=int, default=None, help="snapshot step (default: best deterministic return)")
    args = p.parse_args(argv)
    folder = export_expert(args.zoo, args.out, args.step)
    meta = json.loads((folder / "policy.json").read_text())
    print(f"wrote {folder} ({meta['env_id']}, {meta['source'].split(' (')[0]}, return {meta['return_mean']:.1f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
