#!/usr/bin/env bash
# Rebuild the datasets bundled with offrl from the command lines below (recorded in MANIFEST.json).
# The zoos live outside the package (folder $ZOO, default ./zoo); each `train-behavior` run is seeded.
#   build.sh [--train]                      (re)build the bundled datasets; --train first trains the zoos
#   OFFRL_BENCH_DATA=DATA_DIR build.sh      also collect the `offrl benchmark` tiers (100k transitions each)
#                                           into that folder, outside the package
#   OFFRL_SKIP_BUNDLED=1                    skip the bundled datasets (e.g. to collect only the benchmark tiers)
# Run the MuJoCo zoo trainings one at a time on a small machine (nice -n 5 on a shared one).
set -euo pipefail
ZOO=${ZOO:-./zoo}
HERE="$(cd "$(dirname "$0")" && pwd)"

if [ "${1:-}" = "--train" ]; then
  offrl collect train-behavior --env Pendulum-v1 --steps 20000 --start-steps 1000 --snapshot-every 1000 --eval-episodes 20 --seed 0 --out "$ZOO/pendulum20k" --quiet
  offrl collect train-behavior --env CartPole-v1 --steps 40000 --snapshot-every 2000 --eval-episodes 10 --seed 0 --out "$ZOO/cartpole40k" --quiet
  offrl collect train-behavior --env Hopper-v5 --steps 300000 --start-steps 5000 --snapshot-every 10000 --eval-episodes 5 --seed 0 --out "$ZOO/hopper" --quiet
  offrl collect train-behavior --env HalfCheetah-v5 --steps 150000 --start-steps 5000 --snapshot-every 10000 --eval-episodes 3 --seed 0 --out "$ZOO/halfcheetah" --quiet
  # Walker2d: seed 0 never learned in 100k steps (best 500); seed 1 reached 2847 (normalized 62) at 250k.
  offrl collect train-behavior --env Walker2d-v5 --steps 300000 --start-steps 10000 --snapshot-every 10000 --eval-episodes 3 --seed 1 --out "$ZOO/walker2d" --quiet
fi

if [ -n "${OFFRL_BENCH_DATA:-}" ]; then
  # The benchmark's tier files: <env>-<tier>-v0.hdf5, written under a temporary name and moved into place,
  # so an interrupted collection never leaves a truncated file with the final name.
  mkdir -p "$OFFRL_BENCH_DATA"
  for pair in hopper:Hopper-v5 halfcheetah:HalfCheetah-v5 walker2d:Walker2d-v5; do
    family=${pair%%:*}; env_id=${pair#*:}
    for tier in medium medium-replay medium-expert expert; do
      final="$OFFRL_BENCH_DATA/$family-$tier-v0.hdf5"
      [ -f "$final" ] && continue
      offrl collect dataset --env "$env_id" --tier "$tier" --size 100000 --seed 0 --zoo "$ZOO/$family" --out "$final.partial.hdf5" --no-register --quiet
      mv "$final.partial.hdf5" "$final"
    done
  done
  # then: offrl benchmark --envs hopper,halfcheetah,walker2d --dataset-pattern "$OFFRL_BENCH_DATA/{env}-{tier}-v0.hdf5" ...
fi
[ "${OFFRL_SKIP_BUNDLED:-}" = "1" ] && exit 0

for tier in random medium medium-replay expert; do
  offrl collect dataset --env Pendulum-v1 --tier "$tier" --size 10000 --seed 0 --zoo "$ZOO/pendulum20k" --out "$HERE/pendulum-$tier-v0.hdf5" --no-register --quiet
done
offrl collect dataset --env Pendulum-v1 --tier medium-expert --size 20000 --seed 0 --zoo "$ZOO/pendulum20k" --out "$HERE/pendulum-medium-expert-v0.hdf5" --no-register --quiet
offrl collect dataset --env CartPole-v1 --tier medium-expert --size 10000 --seed 0 --zoo "$ZOO/cartpole40k" --out "$HERE/cartpole-medium-expert-v0.hdf5" --no-register --compress --quiet
if [ -f "$ZOO/hopper/zoo.json" ]; then
  offrl collect dataset --env Hopper-v5 --tier medium --size 20000 --seed 0 --zoo "$ZOO/hopper" --name hopper-medium-20k-v0 --out "$HERE/hopper-medium-20k-v0.hdf5" --no-register --compress --quiet
fi
# Experts for `offrl demo dagger` (NumPy policies: policy.npz + policy.json): each zoo's best snapshot.
python -m offrl.demos.experts --zoo "$ZOO/pendulum20k" --out "$HERE/experts/pendulum-sac"
python -m offrl.demos.experts --zoo "$ZOO/cartpole40k" --out "$HERE/experts/cartpole-dqn"
chmod 644 "$HERE"/*.hdf5 "$HERE"/experts/*/*
python "$HERE/manifest.py"
