"""``offrl demo NAME``: a failure mode of offline RL made visible, ending with a plot, a JSON and a verdict.

    offrl demo extrapolation --out offrl-demo
"""

from __future__ import annotations


def register(subparsers) -> None:
    from offrl.demos import DEMOS

    parser = subparsers.add_parser("demo", help="see a failure mode of offline RL on your machine (plot + JSON + verdict)",
                                   description="Run one demo: " + ", ".join(DEMOS) + ".")
    parser.add_argument("name", choices=DEMOS, help="which demo")
    parser.add_argument("--out", default="offrl-demo", help="folder for the figure and the JSON (default offrl-demo)")
    parser.add_argument("--seed", type=int, default=0)
    parser.set_defaults(func=run_demo)


def run_demo(args) -> int:
    import importlib

    from rich.console import Console

    module = importlib.import_module(f"offrl.demos.{args.name.replace('-', '_')}")
    console = Console()
    with console.status(f"offrl demo {args.name} ..."):
        result = module.run(out=args.out, seed=args.seed)
    console.print(f"figure: {result['files']['figure']}\nnumbers: {result['files']['json']}")
    console.print(f"[bold]{result['verdict']}")
    return 0
