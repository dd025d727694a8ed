#!/usr/bin/env bash
# The `offrl benchmark --budget cpu` table of the newer algorithms (ReBRAC, SAC-N, EDAC, LB-SAC, SPOT,
# XQL, CRR, BEAR, PLAS, TD3-AWR, BRAC, MOPO, MOBILE, COMBO, IDQL, FQL) on Hopper, HalfCheetah and
# Walker2d x medium, medium-replay, 3 seeds, each at the updates and settings its BUDGETS["cpu"] entry
# gives (sized in benchmarks/results/new-algos-budget-2026-12-03.md: about 8 hours of a 2-core CPU).
# IQL and TD3+BC on the same tier files are in benchmarks/results/cpu-table (benchmarks/cpu_table.sh).
# Resumable cell by cell: a finished cell's folder is kept under benchmarks/results/new-algos-table
# and skipped; rerun the same command to continue.
#   benchmarks/new_algos_table.sh [ENVS] [ALGOS]    defaults: halfcheetah,hopper,walker2d  and the 16 above
# Then commit benchmarks/results/new-algos-table (`git add benchmarks/results/new-algos-table`).
set -euo pipefail
cd "$(dirname "$0")/.."
ENVS=${1:-halfcheetah,hopper,walker2d}
ALGOS=${2:-rebrac,sac_n,edac,lb_sac,spot,xql,crr,bear,plas,td3_awr,brac,mopo,mobile,combo,idql,fql}
python3 benchmarks/mujoco_tiers.py --envs "$ENVS" --tiers medium,medium-replay
offrl benchmark --envs "$ENVS" --tiers medium,medium-replay --algos "$ALGOS" --budget cpu --seeds 3 \
  --out benchmarks/results/new-algos-table --dataset-pattern "benchmarks/data/tiers/{env}-{tier}-v0.hdf5" --no-progress
