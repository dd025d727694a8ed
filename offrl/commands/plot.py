"""``offrl plot RUN...``: learning curves and the Q-vs-return panel as PNG."""

from __future__ import annotations


def register(subparsers) -> None:
    p = subparsers.add_parser("plot", help="plot learning curves and Q estimates of runs",
                              description="Draw learning curves (mean ± std over seeds) and the critic-estimate-vs-realised-return panel for one or more runs.")
    p.add_argument("runs", nargs="+", help="run folders written by `offrl train`")
    p.add_argument("--out", default=None, help="output folder (default: the first run's plots/)")
    p.set_defaults(func=run)


def run(args) -> int:
    from pathlib import Path

    from offrl.engine import load_run
    from offrl.plotting import plot_runs

    runs = [load_run(path, with_agent=False) for path in args.runs]
    out = Path(args.out) if args.out else Path(args.runs[0]) / "plots"
    for path in plot_runs(runs, out):
        print(path)
    return 0
