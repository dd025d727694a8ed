"""``offrl inspect DATASET``: the dataset doctor from the command line.

Examples::

    offrl inspect hopper-medium-v0                 # rich summary, tier estimate, advice
    offrl inspect data/my_logs.hdf5 --env Hopper-v5
    offrl inspect ~/.minari/datasets/D4RL/door/human-v2 --json > report.json
    offrl inspect walker.npz --report reports/walker   # PNG plots + summary.md
    offrl inspect --list                            # registered dataset names
"""

from __future__ import annotations


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "inspect",
        help="summarise a dataset: returns, coverage, quality tier and which algorithm to use",
        description="The dataset doctor: episodes, returns (normalized when the env's reference returns are known), "
                    "reward scale, terminal/timeout counts, action and state coverage, duplicates, an estimate of the "
                    "quality tier and a recommended algorithm.")
    parser.add_argument("dataset", nargs="?", help="a registered dataset name, a .hdf5/.npz file or a Minari folder")
    parser.add_argument("--env", default=None, help="environment id for reference returns when the metadata lacks env_id")
    parser.add_argument("--json", action="store_true", help="print the report as JSON instead of tables")
    parser.add_argument("--report", metavar="DIR", default=None,
                        help="also write returns.png, actions.png, states.png, summary.md and report.json to DIR")
    parser.add_argument("--list", action="store_true", help="list registered dataset names and exit")
    parser.set_defaults(func=run)


def run(args) -> int:
    import json
    import sys
    import warnings

    from offrl.data import list_datasets, load, resolve
    from offrl.data.checks import DatasetWarning
    from offrl.errors import ConfigError

    if args.list:
        names = list_datasets()
        if args.json:
            print(json.dumps(names, indent=1))
        elif not names:
            print("no registered datasets yet; make one with `offrl collect dataset --env Hopper-v5 --tier medium`")
        else:
            for name, path in names.items():
                print(f"{name}\t{path}")
        return 0
    if not args.dataset:
        raise ConfigError("offrl inspect needs a DATASET (a registered name, a .hdf5/.npz file or a Minari folder); see --list.")

    from offrl.data.doctor import inspect_dataset, render, write_report
    from offrl.envs import check_env_id

    check_env_id(args.env)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", DatasetWarning)
        ds = load(args.dataset)
    load_warnings = [str(w.message) for w in caught if issubclass(w.category, DatasetWarning)]
    for message in load_warnings:
        print(f"offrl: warning: {message}", file=sys.stderr)
    report = inspect_dataset(ds, env_id=args.env)
    report["load_warnings"] = load_warnings
    if args.report:
        written = write_report(report, args.report, dataset_path=str(resolve(args.dataset)))
        report["report_files"] = written
    if args.json:
        print(json.dumps(report, indent=1))
    else:
        render(report)
        if args.report:
            print(f"report written to {args.report}: {', '.join(sorted(p.split('/')[-1] for p in report['report_files'].values()))}")
    return 0
