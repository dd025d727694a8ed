#!/usr/bin/env bash
# The `offrl benchmark --budget cpu` table (Hopper, HalfCheetah, Walker2d x medium, medium-replay,
# medium-expert x BC, BCQ, CQL, IQL, TD3+BC, AWAC, 3 seeds) on the tiers rebuilt from the packed
# zoos in benchmarks/data/mujoco. Resumable cell by cell: a finished cell's folder (cell.json,
# config.json, metrics; its checkpoints are not committed) is kept under
# benchmarks/results/cpu-table and skipped; rerun the same command to continue.
#   benchmarks/cpu_table.sh [ENVS] [ALGOS] [TIERS]
#   defaults: halfcheetah,hopper,walker2d  bc,td3_bc,iql,bcq,awac,cql  medium,medium-replay,medium-expert
# (a subset of envs, algorithms or tiers runs and resumes those cells of the same table)
# Then commit benchmarks/results/cpu-table (`git add benchmarks/results/cpu-table`).
set -euo pipefail
cd "$(dirname "$0")/.."
ENVS=${1:-halfcheetah,hopper,walker2d}
ALGOS=${2:-bc,td3_bc,iql,bcq,awac,cql}
TIERS=${3:-medium,medium-replay,medium-expert}
python3 benchmarks/mujoco_tiers.py --envs "$ENVS" --tiers "$TIERS"
offrl benchmark --envs "$ENVS" --tiers "$TIERS" --algos "$ALGOS" --budget cpu --seeds 3 \
  --out benchmarks/results/cpu-table --dataset-pattern "benchmarks/data/tiers/{env}-{tier}-v0.hdf5" --no-progress
