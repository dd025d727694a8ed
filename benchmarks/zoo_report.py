"""The behaviour-policy zoos behind the benchmark tiers: each snapshot's return, the wall time, and
the expert against D4RL's reference returns.

    python benchmarks/zoo_report.py /work/zoo/hopper /work/zoo/halfcheetah /work/zoo/walker2d \\
        > benchmarks/results/zoos-2026-12-01.md
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(folders) -> None:
    from offrl.collect.tiers import select_snapshots
    from offrl.envs import D4RL_REFERENCE_RETURNS, env_family

    print("# Behaviour-policy zoos (offrl SAC) behind the benchmark tiers\n")
    print("Returns are the mean over the zoo's evaluation episodes of the stochastic policy (deterministic in brackets). "
          "Normalized against D4RL's reference returns (d4rl/infos.py): our experts are weaker than D4RL's.\n")
    rows = []
    for folder in folders:
        index = json.loads((Path(folder) / "zoo.json").read_text())
        family = env_family(index["env_id"])
        lo, hi = D4RL_REFERENCE_RETURNS[family]
        chosen = select_snapshots(index)
        norm = lambda r: 100 * (r - lo) / (hi - lo)  # noqa: E731
        print(f"## {index['env_id']}\n\n`{index['command']}`\n")
        print(f"{index['steps_done']:,} steps in {index['wall_time_s'] / 60:.0f} min of wall time on the shared 2-core CPU "
              f"(under load: other sessions' jobs ran beside it).\n")
        print("| step | return | deterministic | normalized | role |\n|---|---|---|---|---|")
        for s in sorted(index["snapshots"], key=lambda s: s["step"]):
            role = ", ".join(k for k in ("random", "medium", "expert") if chosen[k]["step"] == s["step"])
            print(f"| {s['step']:,} | {s['return_mean']:.0f} | {s['deterministic_return_mean']:.0f} | {norm(s['return_mean']):.1f} | {role} |")
        e = chosen["expert"]
        rows.append((index["env_id"], e["step"], e["return_mean"], norm(e["return_mean"]), hi, chosen["medium"]["step"],
                     chosen["medium"]["return_mean"], norm(chosen["medium"]["return_mean"]), index["wall_time_s"]))
        print()
    print("## Summary\n\n| env | expert snapshot | expert return | normalized | D4RL expert return | medium snapshot | medium return | normalized | wall min |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r[0]} | {r[1]:,} | {r[2]:.0f} | {r[3]:.1f} | {r[4]:.0f} | {r[5]:,} | {r[6]:.0f} | {r[7]:.1f} | {r[8] / 60:.0f} |")


if __name__ == "__main__":
    main(sys.argv[1:])
