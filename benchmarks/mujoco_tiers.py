"""Rebuild the MuJoCo benchmark tiers from the packed zoos committed under ``benchmarks/data/mujoco``.

Training the Hopper, HalfCheetah and Walker2d zoos takes about two hours of a 2-core CPU; the
packed zoos (``offrl collect pack``: the random, medium and expert snapshots and the replay up to
the medium snapshot) are kept in the repository instead, and the 100k-transition tier files that
``offrl benchmark`` and the OPE benchmark read are rebuilt from them in minutes on a fresh machine:

    python benchmarks/mujoco_tiers.py                       # every packed env, the table's tiers
    python benchmarks/mujoco_tiers.py --envs hopper --tiers medium,medium-replay

Each file is written under a temporary name and renamed when complete; an existing file is kept.
``benchmarks/data/mujoco/<env>/tiers.json`` records a SHA-256 of every tier's arrays: the first
build writes it, later builds must match it (otherwise the tier differs from the one the committed
results were measured on, and the script stops with exit 2 before anything trains on it). The
behaviour policies act through ``reproducible_rollout_policy``, so a tier's bits do not depend on
the host's processor.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
ZOOS = ROOT / "benchmarks" / "data" / "mujoco"
OUT = ROOT / "benchmarks" / "data" / "tiers"
ENV_IDS = {"hopper": "Hopper-v5", "halfcheetah": "HalfCheetah-v5", "walker2d": "Walker2d-v5"}
TABLE_TIERS = ("medium", "medium-replay", "medium-expert")
KEYS = ("observations", "actions", "rewards", "next_observations", "terminals", "timeouts")


def digest(ds) -> str:
    """SHA-256 of the dataset's arrays (fixed key order, dtype and shape included); metadata excluded."""
    h = hashlib.sha256()
    arrays = [(k, getattr(ds, k)) for k in KEYS] + [(f"infos/{k}", ds.infos[k]) for k in sorted(ds.infos)]
    for key, arr in arrays:
        arr = np.ascontiguousarray(arr)
        h.update(f"{key}:{arr.dtype.str}:{arr.shape}".encode())
        h.update(arr.tobytes())
    return h.hexdigest()


def build(env: str, tier: str, size: int, seed: int, out_dir: Path, log=print) -> Path:
    import offrl.data as data
    from offrl.collect.tiers import build_tier_dataset

    zoo = ZOOS / env
    if not (zoo / "zoo.json").exists():
        raise SystemExit(f"error: no packed zoo for {env} at {zoo}; train one with `offrl collect train-behavior` and pack it with `offrl collect pack`.")
    final = out_dir / f"{env}-{tier}-v0.hdf5"
    record_path = zoo / "tiers.json"
    record = json.loads(record_path.read_text()) if record_path.exists() else {}
    key = f"{tier}:{size}:{seed}"
    if final.exists():
        ds = data.load(final)
        if key in record and digest(ds) != record[key]["sha256"]:
            raise SystemExit(f"error: {final} does not match the tier recorded in {record_path} ({key}); delete it and rerun to rebuild it.")
        log(f"{final.relative_to(ROOT) if final.is_relative_to(ROOT) else final}: present, kept")
        return final
    t0 = time.perf_counter()
    ds = build_tier_dataset(zoo, tier, size=size, seed=seed, env_id=ENV_IDS[env], progress=False,
                            command=f"python benchmarks/mujoco_tiers.py --envs {env} --tiers {tier} --size {size} --seed {seed}")
    sha = digest(ds)
    if key in record and record[key]["sha256"] != sha:
        raise SystemExit(f"error: the {env} {tier} tier rebuilt here differs from the one recorded in {record_path} ({key}): "
                         f"{sha[:12]} vs {record[key]['sha256'][:12]}; the packages (offrl, MuJoCo, Gymnasium, JAX) differ from the ones "
                         f"it was built with ({record[key].get('versions')}); results measured on the recorded tier do not apply to this one.")
    out_dir.mkdir(parents=True, exist_ok=True)
    partial = final.with_name(final.name + ".partial.hdf5")
    partial.unlink(missing_ok=True)
    data.save(ds, partial, overwrite=True)
    partial.rename(final)
    if key not in record:
        record[key] = {"sha256": sha, "rows": int(len(ds)), "episodes": int(ds.num_episodes),
                       "dataset_return_mean": ds.metadata.get("dataset_return_mean"), "versions": _versions()}
        record_path.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    log(f"{final.relative_to(ROOT) if final.is_relative_to(ROOT) else final}: built in {time.perf_counter() - t0:.0f} s, "
        f"{len(ds)} rows, {ds.num_episodes} episodes, sha256 {sha[:12]}")
    return final


def _versions() -> dict:
    import gymnasium
    import jax
    import mujoco

    import offrl

    return {"offrl": offrl.__version__, "jax": jax.__version__, "mujoco": mujoco.__version__, "gymnasium": gymnasium.__version__}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--envs", default=None, help="comma-separated (default: every env with a packed zoo)")
    p.add_argument("--tiers", default=",".join(TABLE_TIERS), help=f"comma-separated (default {','.join(TABLE_TIERS)})")
    p.add_argument("--size", type=int, default=100_000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=str(OUT), help="folder of the tier files (default benchmarks/data/tiers, not committed)")
    args = p.parse_args(argv)
    envs = args.envs.split(",") if args.envs else sorted(e for e in ENV_IDS if (ZOOS / e / "zoo.json").exists())
    unknown = [e for e in envs if e not in ENV_IDS]
    if unknown:
        print(f"error: --envs {','.join(unknown)} unknown; choose from {', '.join(ENV_IDS)}.", file=sys.stderr)
        return 2
    try:
        for env in envs:
            for tier in args.tiers.split(","):
                build(env, tier, args.size, args.seed, Path(args.out))
    except SystemExit as e:
        print(e, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
