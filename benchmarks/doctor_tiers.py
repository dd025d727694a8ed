"""The dataset doctor on every MuJoCo tier file the benchmark uses, and the test fixture made from them.

For each ``<family>-<tier>-v0.hdf5`` in ``--data`` (and any ``*-sb3-*.hdf5`` in ``--extra``),
runs :func:`offrl.data.doctor.inspect_dataset` and prints the kind, tier, confidence and level it
finds beside the kind the file's tier implies. With ``--fixture PATH`` it also writes the
statistics the kind rule consumes (held-out action predictability and its trend, lag-1 action
autocorrelation, action-histogram flatness) and every episode's return, rounded, per file: a few
kilobytes that ``tests/data/test_doctor_mujoco_tiers.py`` classifies again in the default suite
(the SB3 files too, marked ``collected_by``).

    python benchmarks/doctor_tiers.py --data DATA_DIR --extra DATA_DIR/sb3 \\
        --fixture tests/data/fixtures/doctor_mujoco_tiers.json --out benchmarks/results/doctor-mujoco-tiers.txt
"""

from __future__ import annotations

import argparse
import json
import re
import time
from pathlib import Path

KIND_OF = {"random": "random actions", "medium": "one policy", "expert": "one policy",
           "medium-expert": "mixture of policies", "medium-replay": "learning history"}


def fixture_entry(ds, report: dict) -> dict:
    """What the kind rule consumes, computed on the whole file (the returns rounded to 0.1)."""
    md = ds.metadata
    return {"env_id": report["env_id"], "tier": md.get("tier"), "episodes": report["episodes"],
            "transitions": report["transitions"],
            "returns": [round(float(r), 1) for r in ds.episode_returns()],
            "references": report["reference_returns"],
            "predictability": report["action_predictability"],
            "action_autocorrelation": report["action_autocorrelation"],
            "action_entropy": report["action_coverage"]["mean_entropy"],
            "doctor": {k: report["tier"][k] for k in ("kind", "estimate", "confidence")}}


def main() -> None:
    from offrl.data import load
    from offrl.data.doctor import inspect_dataset, tier_headline

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", required=True, help="folder of the generated tier files")
    p.add_argument("--extra", default=None, help="a folder of other libraries' tier files (e.g. benchmarks/sb3_tiers.py's)")
    p.add_argument("--fixture", default=None)
    p.add_argument("--out", default=None)
    args = p.parse_args()
    files = sorted(f for f in Path(args.data).glob("*-v0.hdf5") if re.fullmatch(r"[a-z0-9]+-[a-z-]+-v0\.hdf5", f.name))
    if args.extra:
        files += sorted(Path(args.extra).glob("*-sb3-*.hdf5"))
    lines, fixture = [], {}
    for f in files:
        t0 = time.perf_counter()
        ds = load(f)
        report = inspect_dataset(ds)
        tier = report["tier"]
        declared = ds.metadata.get("tier")
        expected = KIND_OF.get(str(declared))
        ok = "ok" if tier["kind"] == expected else "WRONG"
        level = tier.get("level") or {}
        lines.append(f"{f.name}: {tier_headline(tier)}; kind {ok} (expected {expected}); "
                     f"median score {level.get('median_score', float('nan')):.1f}; {report['episodes']} episodes; "
                     f"{time.perf_counter() - t0:.0f} s")
        for reason in tier["reasons"]:
            lines.append(f"    {reason}")
        print("\n".join(lines[-1 - len(tier["reasons"]):]), flush=True)
        fixture[f.stem] = {**fixture_entry(ds, report), "collected_by": "stable-baselines3 SAC" if "-sb3-" in f.name else "offrl zoo"}
    if args.out:
        Path(args.out).write_text("\n".join(lines) + "\n")
    if args.fixture:
        Path(args.fixture).parent.mkdir(parents=True, exist_ok=True)
        Path(args.fixture).write_text(json.dumps(fixture, indent=1) + "\n")


if __name__ == "__main__":
    main()
