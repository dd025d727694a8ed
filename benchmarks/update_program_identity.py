"""Are two checkouts' compiled updates the same program? Lowers ``jax.jit(module.update)`` for each
algorithm on the same HalfCheetah-shaped batch and prints a hash of the StableHLO text (source
locations stripped). Equal hashes mean a refactor left the update itself untouched, so any
throughput difference between the checkouts is measurement noise::

    python benchmarks/update_program_identity.py OLD_CHECKOUT iql,awac,td3_bc,bc
    python benchmarks/update_program_identity.py . iql,awac,td3_bc,bc
"""
import sys, hashlib
sys.path.insert(0, sys.argv[1])
import numpy as np, jax
from offrl.engine import measure_throughput  # noqa
from offrl.algos import get_algorithm
from offrl.algos.common import apply_overrides, Batch
from offrl.engine.chunks import Trainer, create_agents
from offrl.engine.data import prepare_data
from offrl.data import Dataset
import dataclasses
out = []
for algo in sys.argv[2].split(","):
    m = get_algorithm(algo)
    cfg = m.Config()
    if hasattr(cfg, "schedule_steps") and cfg.schedule_steps is None:
        cfg = dataclasses.replace(cfg, schedule_steps=1_000_000)
    rng = np.random.default_rng(0); n = 1000
    obs = rng.standard_normal((n, 17)).astype(np.float32); act = np.tanh(rng.standard_normal((n, 6))).astype(np.float32)
    ds = Dataset.from_arrays(obs, act, rng.standard_normal(n).astype(np.float32), np.zeros(n, bool), next_observations=np.roll(obs, -1, 0))
    data, info = prepare_data(ds, cfg, None, m)
    agents, keys = create_agents(m, cfg, 17, 6, 0, 1)
    agent = jax.tree_util.tree_map(lambda x: x[0], agents)
    batch = Batch(*(data[k][:256] for k in ("observations", "actions", "rewards", "next_observations", "masks")))
    text = jax.jit(m.update).lower(agent, batch).as_text()
    import re
    text = re.sub(r'loc\(.*?\)', '', text)
    text = re.sub(r'#loc\d*', '', text)
    print(algo, hashlib.sha256(text.encode()).hexdigest()[:16], len(text))
