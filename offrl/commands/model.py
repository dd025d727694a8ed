"""``offrl model train DATA --out DIR`` and ``offrl model report DIR``: the dynamics ensemble on its own
(fitted, checkpointed and resumable; then scored on its held-out rows), :mod:`offrl.dynamics_folder`."""

from __future__ import annotations


def register(subparsers) -> None:
    p = subparsers.add_parser("model", help="fit and inspect a dynamics-model ensemble",
                              description="Fit the probabilistic dynamics ensemble of the model-based algorithms on a dataset (checkpointed, resumable) and report where it can be trusted.")
    sub = p.add_subparsers(dest="model_command", metavar="ACTION")
    t = sub.add_parser("train", help="fit the ensemble on DATA into --out",
                       description="Fit the dynamics ensemble on DATA; checkpoints after every --epochs-per-checkpoint epochs.")
    t.add_argument("data", help="registry name or path of the dataset")
    t.add_argument("--out", required=True, help="model folder (config.json, checkpoints/)")
    t.add_argument("--seed", type=int, default=0, help="seed of the initialisation and the held-out split (default 0)")
    t.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                   help="a field of the ensemble (ensemble_size, num_elites, model_hidden_dims, holdout_ratio, model_max_epochs, ...)")
    t.add_argument("--resume", action="store_true", help="continue the fit in --out from its latest checkpoint")
    t.add_argument("--epochs-per-checkpoint", type=int, default=10, help="epochs between checkpoints (default 10)")
    t.set_defaults(func=run_train)
    r = sub.add_parser("report", help="held-out error per dimension and disagreement vs real error",
                       description="Score a fitted model on its held-out rows: RMSE per output dimension, and how well the elites' disagreement tracks the real error (correlation, plot).")
    r.add_argument("model", help="model folder written by `offrl model train`")
    r.add_argument("--data", default=None, help="dataset to score on (default: the one it was fitted on; must match it)")
    r.set_defaults(func=run_report)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


def _overrides(pairs):
    from offrl.errors import ConfigError

    out = {}
    for pair in pairs:
        if "=" not in pair:
            raise ConfigError(f"--set {pair}: write FIELD=VALUE, e.g. --set num_elites=5.")
        key, value = pair.split("=", 1)
        out[key.strip()] = value.strip()
    return out


def run_train(args) -> int:
    from offrl.algos.common import apply_overrides
    from offrl.dynamics import check_settings
    from offrl.dynamics_folder import ModelFitConfig, train_model

    config = apply_overrides(ModelFitConfig(), _overrides(args.set))
    check_settings(config)
    record = train_model(args.data, args.out, config, seed=args.seed, resume=args.resume,
                         epochs_per_checkpoint=args.epochs_per_checkpoint)
    print(f"wrote {args.out} ({'finished' if record['finished'] else 'stopped'}); "
          f"see where it can be trusted with `offrl model report {args.out}`")
    return 0


def run_report(args) -> int:
    from offrl.dynamics_folder import load_model, model_report, write_report

    model, arrays, state, record = load_model(args.model, args.data)
    report = model_report(model, arrays, state)
    path, plot = write_report(args.model, report)
    print(f"model {args.model}: {report['epochs']} epochs, elites {report['elites']}, {report['heldout_rows']} held-out rows")
    print(f"{'output':<10} {'rmse':>10} {'data std':>10} {'rmse/std':>9}")
    for name, value in report["rmse"].items():
        std = report["target_std"][name]
        print(f"{name:<10} {value:>10.4g} {std:>10.4g} {value / std:>9.3f}")
    print(f"disagreement vs real error: Pearson {report['disagreement_error_pearson']:.3f}, "
          f"Spearman {report['disagreement_error_spearman']:.3f} (near 1: trust the model where its elites agree)")
    print(f"wrote {path} and {plot}")
    return 0
