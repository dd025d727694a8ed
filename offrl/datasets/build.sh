#!/usr/bin/env bash
# Rebuild the datasets bundled with offrl from the command lines below (recorded in MANIFEST.json).
# The zoos live outside the package (default /work/zoo); each `train-behavior` run is seeded.
set -euo pipefail
ZOO=${ZOO:-/work/zoo}
HERE="$(cd "$(dirname "$0")" && pwd)"

if [ "${1:-}" = "--train" ]; then
  offrl collect train-behavior --env Pendulum-v1 --steps 20000 --start-steps 1000 --snapshot-every 1000 --eval-episodes 20 --seed 0 --out "$ZOO/pendulum20k" --quiet
  offrl collect train-behavior --env CartPole-v1 --steps 40000 --snapshot-every 2000 --eval-episodes 10 --seed 0 --out "$ZOO/cartpole40k" --quiet
  offrl collect train-behavior --env Hopper-v5 --steps 300000 --start-steps 5000 --snapshot-every 10000 --eval-episodes 5 --seed 0 --out "$ZOO/hopper" --quiet
fi

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
