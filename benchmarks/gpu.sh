#!/usr/bin/env bash
# offrl on one GPU: install the CUDA builds of JAX and torch, then print
#   1. training throughput (benchmarks/throughput.py, offrl side only unless d3rlpy is installed),
#   2. the 12-configuration x 3-seed IQL sweep vs its members (benchmarks/sweep.py; target on a
#      GPU: the 36-member program's time per update <= 4x ONE member's),
#   3. a 1M-update IQL run, wall time (target: <= 5 minutes on one modern GPU; JAX-CORL reports
#      9 minutes on a GTX 1080 Ti, CORL's PyTorch 4.08 hours),
#   4. issues 23/24's 16 algorithms: updates/s and the projected wall time of 1M updates each, beside
#      JAX-CORL's 1080 Ti time where it has one (benchmarks/gpu_new_algos.py).
# Run from the repository root on a machine with an NVIDIA GPU and CUDA 12 drivers:
#     bash benchmarks/gpu.sh [--skip-install]
#     SECTIONS=4 bash benchmarks/gpu.sh --skip-install      # only some sections (a short device lease)
# Every figure is printed; results also go to benchmarks/results/gpu-<date>.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="benchmarks/results/gpu-$(date -u +%Y-%m-%d).txt"
mkdir -p benchmarks/results

if [[ "${1:-}" != "--skip-install" ]]; then
    python -m pip install --upgrade "jax[cuda12]"
    python -m pip install --upgrade torch --index-url https://download.pytorch.org/whl/cu124
    python -m pip install -e ".[test]"
fi

SECTIONS=${SECTIONS:-1,2,3,4}
want() { [[ ",$SECTIONS," == *",$1,"* ]]; }

{
echo "== offrl GPU benchmark, $(date -u), sections $SECTIONS"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
python - <<'PY'
import jax, torch
print("jax", jax.__version__, jax.devices())
print("torch", torch.__version__, "cuda available:", torch.cuda.is_available())
assert jax.devices()[0].platform == "gpu", "JAX does not see the GPU: check the jax[cuda12] install"
PY

if want 1; then
echo "== 1. throughput (steps/s; offrl only when d3rlpy is absent)"
python benchmarks/throughput.py --algos iql,td3_bc,cql --quick || echo "throughput.py needs d3rlpy for its side-by-side; see benchmarks/README.md"
python - <<'PY'
import numpy as np
from offrl.engine import measure_throughput
rng = np.random.default_rng(0)
n = 1_000_000
obs = rng.standard_normal((n, 17)).astype(np.float32)
act = np.tanh(rng.standard_normal((n, 6))).astype(np.float32)
rew = rng.standard_normal(n).astype(np.float32)
for algo in ("iql", "td3_bc", "cql"):
    for seeds in (1, 10):
        r = measure_throughput(algo, obs, act, rew, np.roll(obs, -1, 0), num_updates=5000, seeds=seeds, details=True)
        print(f"{algo:7s} seeds={seeds:2d}: {r['steps_per_s']:10.0f} updates/s (all seeds), compile {r['compile_s']:.1f} s")
PY
fi

if want 2; then
echo "== 2. sweep: 12 configurations x 3 seeds in one program vs one member"
python benchmarks/sweep.py --rounds 5 --chunk 1000 --processes 3 --steps 20000
fi

if want 3; then
echo "== 3. IQL, 1M updates, 256x256, batch 256, 1M random transitions, one seed"
python - <<'PY'
import time
import numpy as np
from offrl.engine import measure_throughput
rng = np.random.default_rng(0)
n = 1_000_000
obs = rng.standard_normal((n, 17)).astype(np.float32)
act = np.tanh(rng.standard_normal((n, 6))).astype(np.float32)
t0 = time.perf_counter()
r = measure_throughput("iql", obs, act, rng.standard_normal(n).astype(np.float32), np.roll(obs, -1, 0),
                       num_updates=100_000, seeds=1, repeats=10, details=True)
wall = time.perf_counter() - t0
print(f"IQL 1M updates (compile + 11 chunks of 100k, 1.1M updates in all): {wall:.1f} s wall; best chunk "
      f"{r['steps_per_s']:.0f} updates/s -> 1M updates in {1e6 / r['steps_per_s'] / 60:.2f} min (target <= 5 min)")
PY
fi

if want 4; then
echo "== 4. issues 23/24's algorithms: updates/s and projected 1M-update wall time"
python benchmarks/gpu_new_algos.py --json "benchmarks/results/gpu-new-algos-$(date -u +%Y-%m-%d).json"
fi
} 2>&1 | tee "$OUT"
echo "written to $OUT"
