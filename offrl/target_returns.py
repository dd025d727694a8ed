"""Return-conditioned evaluation: does the achieved return follow the target?

:func:`parse_target_returns` reads ``--target-return`` / ``--target-returns`` values,
:func:`check_return_conditioned` refuses a run whose algorithm's spec is not
``return_conditioned`` (:mod:`offrl.algos.contract`) in one line,
:func:`target_return_sweep` evaluates a return-conditioned run (e.g. DT) once per target, and
:func:`plot_target_returns` draws achieved vs target return with the ``y = x`` line (Chen et
al. 2021, Figure 4).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from offrl.errors import ConfigError


def parse_target_returns(text: str, flag: str = "--target-returns") -> list[float]:
    """``"a,b,c"`` -> ``[a, b, c]``; a value that is not a finite number is a :class:`ConfigError`."""
    values = []
    for part in str(text).split(","):
        try:
            value = float(part)
        except ValueError:
            value = math.nan
        if not math.isfinite(value):
            raise ConfigError(f"{flag} value {part.strip()!r} is not a finite number; pass returns in env units, e.g. {flag} -500,-300,-150.")
        values.append(value)
    return values


def check_return_conditioned(algo: str, flag: str = "--target-return") -> None:
    """Refuse ``flag`` for a run of ``algo`` unless its spec is ``return_conditioned``."""
    from offrl.algos import algorithm_names, algorithm_spec

    if not algorithm_spec(algo).return_conditioned:
        raise ConfigError(f"{flag} applies to return-conditioned algorithms ({', '.join(algorithm_names(return_conditioned=True))}); "
                          f"this run was trained with --algo {algo}, drop {flag}.")


def target_return_sweep(run, targets: list[float], episodes: int = 10, env: str | None = None,
                        eval_seed: int = 20_000) -> list[dict]:
    """One row per target: ``target``, ``return`` (mean, std over seeds) and ``normalized_score``.
    ``run`` is a :class:`offrl.engine.Run` or its folder."""
    from offrl.engine.run import Run, evaluate, load_run

    if not isinstance(run, Run):
        check_return_conditioned(load_run(run, with_agent=False).algo, "--target-returns")
        run = load_run(run)
    check_return_conditioned(run.algo, "--target-returns")
    rows = []
    for target in targets:
        result = evaluate(run, episodes=episodes, env=env, eval_seed=eval_seed, policy_options={"target_return": target})
        rows.append({"target": float(target), "return": result["return"], "normalized_score": result["normalized_score"],
                     "env": result["env"], "episodes": episodes})
    return rows


def plot_target_returns(rows: list[dict], out: str | Path) -> Path:
    """``out`` (a PNG): achieved return (mean ± std over seeds) against the target, with ``y = x``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    target = np.array([r["target"] for r in rows])
    mean = np.array([r["return"][0] for r in rows])
    std = np.array([r["return"][1] for r in rows])
    fig, ax = plt.subplots(figsize=(4.5, 4))
    ax.errorbar(target, mean, yerr=std, marker="o", capsize=3, label="achieved")
    lo, hi = float(min(target.min(), mean.min())), float(max(target.max(), mean.max()))
    ax.plot([lo, hi], [lo, hi], "k--", lw=1, label="target")
    ax.set_xlabel("target return")
    ax.set_ylabel("achieved return")
    ax.legend()
    fig.tight_layout()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out
