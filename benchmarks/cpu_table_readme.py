"""Regenerate a `--budget cpu` table in the README from the finished cells of a benchmark folder
(``cpu_table.sh`` and ``new_algos_table.sh`` commit each cell as it finishes):

    python benchmarks/cpu_table_readme.py            # benchmarks/results/cpu-table -> the README's cpu-table block
    python benchmarks/cpu_table_readme.py --table benchmarks/results/new-algos-table --marker new-algos-table \
        --beside benchmarks/results/cpu-table:iql,td3_bc

Each run rewrites the folder's results.md/results.csv and the README's block between
``<!-- MARKER:begin -->`` and ``<!-- MARKER:end -->``: one row per dataset, one column per algorithm
(then the ``--beside`` algorithms of another folder, on the same datasets, for comparison), each
cell the last evaluation's normalized score (mean ± std over seeds) and its wall time, unfinished
cells as ``-``; where ``offrl benchmark --peer`` ran, the peer's score and wall time follow
ours in the same cell. Nothing else in the README is touched; a README without both markers is refused.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def markers(name: str) -> tuple[str, str]:
    return f"<!-- {name}:begin -->", f"<!-- {name}:end -->"


def finished_cells(folder: Path) -> tuple[dict, list[dict]]:
    """The table's ``benchmark.json`` record and its finished cells, in the table's order
    (:func:`offrl.benchmark.folder_cells`, peer columns included)."""
    from offrl.benchmark import folder_cells

    return json.loads((folder / "benchmark.json").read_text()), folder_cells(folder)


def readme_table(record: dict, cells: list[dict], beside: list[dict] = (), beside_from: str = "") -> str:
    """The README's block: the budget in words, then score ± std (wall time) per cell; ``beside``
    are finished cells of another folder (``beside_from``) shown after this table's columns."""
    algos = list(record["algos"])
    extra = [a for a in dict.fromkeys(c["algo"] for c in beside) if a not in algos]
    by = {(c["env"], c["tier"], c["algo"]): c for c in [*beside, *cells]}
    total = len(record["envs"]) * len(record["tiers"]) * len(algos)
    steps = {a: record.get("algo_steps", {}).get(a, record["steps"]) for a in algos}
    settings = "; ".join(f"{a.upper()} " + ", ".join(f"{k}={v}" for k, v in sorted(s.items()))
                         for a, s in sorted(record.get("overrides", {}).items()) if s)
    wall = sum(c["wall_s"] for c in cells)
    peers = sorted({c["peer"] for c in [*beside, *cells] if c.get("peer_last_mean") is not None})
    lines = [f"{len(cells)} of {total} cells finished ({wall / 3600:.1f} h of wall time so far). Normalized score at the "
             f"last evaluation, mean ± std over {record['seeds']} seeds (vmapped), and the cell's wall time in minutes "
             f"(training, evaluation and compilation of all seeds). Updates: "
             + ", ".join(f"{a.upper()} {s // 1000}k" for a, s in steps.items())
             + (f"; settings other than the defaults: {settings}" if settings else "") + "."
             + (f" Beside them, for comparison, {', '.join(a.upper() for a in extra)} on the same tier files "
                f"from `{beside_from}` (their own budgets)." if extra else "")
             + (f" After a semicolon: the same cell run by {', '.join(peers)} (`offrl benchmark --peer`: the same file, "
                f"network sizes, updates, seeds and evaluation), and its wall time." if peers else ""), "",
             "| dataset | " + " | ".join(a.upper() for a in [*algos, *extra]) + " |", "|---|" + "---|" * len(algos + extra)]
    for env in record["envs"]:
        for tier in record["tiers"]:
            row = []
            for algo in [*algos, *extra]:
                c = by.get((env, tier, algo))
                text = ("-" if c is None or c.get("last_mean") is None
                        else f"{c['last_mean']:.1f} ± {c['last_std']:.1f} ({c['wall_s'] / 60:.0f} min)")
                if c is not None and c.get("peer_last_mean") is not None:
                    text += (f"; {c['peer']} {c['peer_last_mean']:.1f} ± {c['peer_last_std']:.1f}"
                             f" ({c['peer_wall_s'] / 60:.0f} min)")
                row.append(text)
            lines.append(f"| {env}-{tier} | " + " | ".join(row) + " |")
    return "\n".join(lines)


def replace_block(text: str, block: str, where: str, marker: str = "cpu-table") -> str:
    BEGIN, END = markers(marker)
    if text.count(BEGIN) != 1 or text.count(END) != 1 or text.index(BEGIN) > text.index(END):
        raise SystemExit(f"error: {where} must hold exactly one {BEGIN} ... {END} block; add the two markers where the table goes.")
    head, rest = text.split(BEGIN)
    _, tail = rest.split(END)
    return f"{head}{BEGIN}\n{block}\n{END}{tail}"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--table", default=str(ROOT / "benchmarks" / "results" / "cpu-table"))
    p.add_argument("--readme", default=str(ROOT / "README.md"))
    p.add_argument("--marker", default="cpu-table", help="the README block's name: <!-- MARKER:begin --> ... <!-- MARKER:end -->")
    p.add_argument("--beside", default="", metavar="FOLDER:ALGO,ALGO",
                   help="another benchmark folder's algorithms shown after this table's columns, e.g. benchmarks/results/cpu-table:iql,td3_bc")
    args = p.parse_args(argv)
    from offrl.benchmark import write_table

    folder, readme = Path(args.table), Path(args.readme)
    if not (folder / "benchmark.json").exists():
        print(f"error: {folder} has no benchmark.json; run benchmarks/cpu_table.sh first.", file=sys.stderr)
        return 2
    record, cells = finished_cells(folder)
    beside, beside_from = [], ""
    if args.beside:
        other, _, names = args.beside.rpartition(":")
        if not other or not names or not (Path(other) / "benchmark.json").exists():
            print(f"error: --beside '{args.beside}' must be FOLDER:ALGO[,ALGO] with a benchmark.json in FOLDER, "
                  f"e.g. benchmarks/results/cpu-table:iql,td3_bc.", file=sys.stderr)
            return 2
        other, wanted = Path(other), set(names.split(","))
        beside = [c for c in finished_cells(other)[1] if c["algo"] in wanted
                  and c["env"] in record["envs"] and c["tier"] in record["tiers"]]
        beside_from = other.resolve().relative_to(ROOT).as_posix() if other.resolve().is_relative_to(ROOT) else str(other)
    try:
        text = replace_block(readme.read_text(), readme_table(record, cells, beside, beside_from), str(readme), args.marker)
    except SystemExit as e:
        print(e, file=sys.stderr)
        return 2
    if cells:
        write_table(cells, folder)
    readme.write_text(text)
    print(f"{len(cells)} cells; {readme} and {folder / 'results.md'} rewritten")
    return 0


if __name__ == "__main__":
    sys.exit(main())
