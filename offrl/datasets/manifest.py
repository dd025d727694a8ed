"""Write MANIFEST.json: for every bundled dataset, its size, returns, scores and the command that made it."""

import hashlib
import json
from pathlib import Path

import numpy as np

import offrl.data as data
from offrl.envs import normalized_score

here = Path(__file__).resolve().parent
manifest = {}
for path in sorted(here.glob("*.hdf5")):
    ds = data.load(path)
    md = ds.metadata
    ret = md.get("dataset_return_mean")
    manifest[path.stem] = {
        "file": path.name, "bytes": path.stat().st_size,
        "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
        "env_id": md["env_id"], "tier": md["tier"], "transitions": len(ds), "episodes": ds.num_episodes,
        "dataset_return_mean": ret,
        "dataset_normalized_score": None if ret is None else float(normalized_score(md["env_id"], ret, md)),
        "policy_return": md["policy_return"],
        "policies": md["policies"], "ref_min_score": md["ref_min_score"], "ref_max_score": md["ref_max_score"],
        "ref_source": md["ref_source"], "command": md["command"], "zoo_command": md["zoo_command"],
    }
(here / "MANIFEST.json").write_text(json.dumps(manifest, indent=2) + "\n")
total = sum(v["bytes"] for v in manifest.values())
print(f"{len(manifest)} datasets, {total / 1e6:.2f} MB")
