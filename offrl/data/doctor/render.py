"""The dataset doctor's renderers: rich tables for the terminal, PNG plots and Markdown.

Each takes the JSON report of :func:`offrl.data.doctor.inspect_dataset` and decides nothing.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from offrl.data.doctor.tier import EXPERT_FROM, RANDOM_BELOW

SPARK = "▁▂▃▄▅▆▇█"


def sparkline(counts) -> str:
    counts = np.asarray(counts, dtype=np.float64)
    if counts.max(initial=0) <= 0:
        return " " * len(counts)
    levels = np.ceil(counts / counts.max() * len(SPARK)).astype(int)
    return "".join(" " if c == 0 else SPARK[min(len(SPARK), max(1, v)) - 1] for c, v in zip(counts, levels))


def _fmt(x, digits=4) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:.{digits}g}" if abs(x) < 1e5 else f"{x:.3e}"
    return str(x)


def render(report: dict, console=None) -> None:
    """Print the report as rich tables."""
    from rich.console import Console
    from rich.panel import Panel
    from rich.table import Table

    if console is None:
        console = Console()
        if not console.is_terminal:
            console = Console(width=110)  # pipes and files: no cramped 80-column tables
    r = report
    console.print(Panel.fit(f"[bold]{r['source']}[/bold]\nenv: {r['env_id'] or 'unknown'}   "
                            f"obs_dim {r['obs_dim']}   action_dim {r['action_dim']}   infos: {', '.join(r['infos']) or '-'}",
                            title="offrl inspect"))

    t = Table(title="Overview", show_header=False)
    t.add_column("", style="bold")
    t.add_column("")
    el = r["episode_length"]
    t.add_row("transitions", f"{r['transitions']:,}")
    t.add_row("episodes", f"{r['episodes']:,}")
    t.add_row("episode length", f"min {el['min']:.0f} / median {el['median']:.0f} / max {el['max']:.0f}")
    t.add_row("terminals (no bootstrap)", f"{r['terminals']:,} ({r['episodes_ending_in_terminal']} episodes)")
    t.add_row("timeouts (bootstrap)", f"{r['timeouts']:,} ({r['episodes_ending_in_timeout']} episodes)")
    rw = r["rewards"]
    t.add_row("reward scale", f"mean {_fmt(rw['mean'])}  std {_fmt(rw['std'])}  range [{_fmt(rw['min'])}, {_fmt(rw['max'])}]")
    t.add_row("duplicate transitions", f"{r['duplicates']['count']:,} ({100 * r['duplicates']['fraction']:.2f}%)")
    console.print(t)

    t = Table(title="Episode returns")
    for col in ("", "min", "p10", "median", "p90", "max", "std"):
        t.add_column(col, justify="left" if col == "" else "right")
    t.add_column("histogram", no_wrap=True, min_width=20)
    for name, key in (("return", "returns"), ("normalized", "normalized_score")):
        s = r.get(key)
        if s:
            t.add_row(name, *(_fmt(s[k]) for k in ("min", "p10", "median", "p90", "max", "std")),
                      sparkline(s["histogram"]["counts"]))
    console.print(t)
    if r["reference_returns"]:
        console.print(f"  reference returns: random {_fmt(r['reference_returns']['random'])}, expert {_fmt(r['reference_returns']['expert'])}")

    ah = r.get("action_histogram")
    if ah:
        t = Table(title=f"Discrete actions ({ah['num_actions']}; entropy {ah['entropy']:.2f} of the uniform's 1)")
        for col in ("action", "count", "fraction"):
            t.add_column(col, justify="right")
        t.add_column("", no_wrap=True, min_width=20)
        for a, (c, f) in enumerate(zip(ah["counts"], ah["fractions"])):
            t.add_row(str(a), str(c), f"{100 * f:.1f}%", "#" * int(round(30 * f)))
        console.print(t)
    ac = r["action_coverage"]
    t = Table(title=f"Action coverage (bounds from {ac['bounds_from']}, {ac['bins']} bins, visited = >= {ac['visited_threshold']} actions)")
    for col in ("dim", "low", "high", "mean", "std", "coverage", "at bounds"):
        t.add_column(col, justify="right")
    t.add_column("histogram (low..high)", no_wrap=True, min_width=20)
    for d in ([] if ah else ac["per_dim"][:32]):
        j = d["dim"]
        t.add_row(str(j), _fmt(ac["low"][j], 3), _fmt(ac["high"][j], 3), _fmt(d["mean"], 3), _fmt(d["std"], 3),
                  f"{100 * d['coverage']:.0f}%", f"{100 * d['saturated_fraction']:.0f}%", sparkline(d["counts"]))
    if not ah:
        console.print(t)
    sc = r["state_coverage"]
    console.print(f"  state coverage: {100 * sc['occupied_fraction']:.0f}% of a {sc['grid']}x{sc['grid']} grid over the first two principal "
                  f"components (explain {100 * sum(sc['explained_variance']):.0f}% of the variance; {sc['dims_for_90pct']} components explain 90%)")
    if r["action_autocorrelation"] is not None:
        console.print(f"  action lag-1 autocorrelation: {r['action_autocorrelation']:.2f}")
    console.print(f"  {_predictability_text(r)}")

    tier = r["tier"]
    rec = r["recommendation"]
    body = [f"[bold]{tier_headline(tier)}[/bold]"]
    body += [f"  - {x}" for x in tier["reasons"]]
    body.append(f"[bold green]recommendation: {rec['algorithm']}[/bold green]"
                + (f" (alternatives: {', '.join(rec['alternatives'])})" if rec["alternatives"] else ""))
    body += [f"  - {x}" for x in rec["reasons"]]
    console.print(Panel("\n".join(body), title="Quality and advice"))
    for w in r["warnings"]:
        console.print(f"[yellow]warning:[/yellow] {w}")


def write_report(report: dict, folder, dataset_path: str | None = None) -> dict[str, str]:
    """Write ``returns.png``, ``actions.png``, ``states.png``, ``summary.md`` and ``report.json`` into ``folder``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from offrl.errors import DatasetError

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    names = {"returns": "returns.png", "actions": "actions.png", "states": "states.png", "summary": "summary.md",
             "json": "report.json"}
    paths = {k: folder / v for k, v in names.items()}
    if dataset_path is not None:
        src = Path(dataset_path).resolve()
        for p in paths.values():
            if p.resolve() == src or p.resolve() in src.parents:
                raise DatasetError(f"{folder}: the report would overwrite the input {dataset_path}; choose another --report folder.")
    r = report

    # returns (normalized when references are known)
    fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
    s = r["normalized_score"] or r["returns"]
    edges, counts = np.asarray(s["histogram"]["edges"]), np.asarray(s["histogram"]["counts"])
    ax.bar(edges[:-1], counts, width=np.diff(edges), align="edge", color="#4C72B0", edgecolor="white")
    ax.axvline(s["median"], color="k", linestyle="--", linewidth=1, label=f"median {s['median']:.4g}")
    if r["normalized_score"]:
        ax.axvline(RANDOM_BELOW, color="#C44E52", linewidth=1, alpha=0.6, label=f"random < {RANDOM_BELOW:.0f}")
        ax.axvline(EXPERT_FROM, color="#55A868", linewidth=1, alpha=0.6, label=f"expert >= {EXPERT_FROM:.0f}")
        ax.set_xlabel("normalized score per episode (100 = expert reference)")
    else:
        ax.set_xlabel("return per episode")
    ax.set_ylabel("episodes")
    ax.set_title(f"Episode returns: {r['episodes']} episodes; {r['tier']['kind']}, tier '{r['tier']['estimate'] or 'unknown'}'")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(paths["returns"])
    plt.close(fig)

    # action coverage, one panel per dimension (at most 16)
    ac = r["action_coverage"]
    dims = ac["per_dim"][:16]
    cols = min(4, len(dims))
    rows = int(np.ceil(len(dims) / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.4 * rows), dpi=110, squeeze=False)
    for ax, d in zip(axes.flat, dims):
        j = d["dim"]
        e = np.linspace(ac["low"][j], ac["high"][j], ac["bins"] + 1)
        ax.bar(e[:-1], d["counts"], width=np.diff(e), align="edge", color="#DD8452", edgecolor="white")
        ax.set_title(f"action[{j}]: {100 * d['coverage']:.0f}% of its range visited", fontsize=9)
        ax.set_xlim(e[0], e[-1])
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[len(dims):]:
        ax.axis("off")
    fig.suptitle(f"Action coverage (bounds from {ac['bounds_from']})", fontsize=10)
    fig.tight_layout()
    fig.savefig(paths["actions"])
    plt.close(fig)

    # state density over two principal components
    sc = r["state_coverage"]
    dens = np.asarray(sc["density"], dtype=np.float64)
    fig, ax = plt.subplots(figsize=(5.5, 4.6), dpi=110)
    im = ax.imshow(np.log1p(dens), origin="lower", aspect="auto", cmap="viridis",
                   extent=[*sc["x_range"], *sc["y_range"]])
    fig.colorbar(im, ax=ax, label="log(1 + states per cell)")
    ev = sc["explained_variance"] + [0.0] * (2 - len(sc["explained_variance"]))
    ax.set_xlabel(f"PC1 ({100 * ev[0]:.0f}% of variance)")
    ax.set_ylabel(f"PC2 ({100 * ev[1]:.0f}% of variance)")
    ax.set_title(f"State density: {100 * sc['occupied_fraction']:.0f}% of cells occupied", fontsize=10)
    fig.tight_layout()
    fig.savefig(paths["states"])
    plt.close(fig)

    paths["summary"].write_text(summary_markdown(r))
    paths["json"].write_text(json.dumps(r, indent=1))
    return {k: str(v) for k, v in paths.items()}


def summary_markdown(r: dict) -> str:
    """The report as Markdown, with the three plots linked."""
    el, rw, tier, rec = r["episode_length"], r["rewards"], r["tier"], r["recommendation"]
    lines = [f"# Dataset report: `{r['source']}`", "",
             f"- environment: {r['env_id'] or 'unknown'}; obs_dim {r['obs_dim']}, action_dim {r['action_dim']}",
             f"- transitions: {r['transitions']:,}; episodes: {r['episodes']:,} (length min {el['min']:.0f}, median {el['median']:.0f}, max {el['max']:.0f})",
             f"- terminals: {r['terminals']:,}; timeouts: {r['timeouts']:,}",
             f"- rewards: mean {_fmt(rw['mean'])}, std {_fmt(rw['std'])}, range [{_fmt(rw['min'])}, {_fmt(rw['max'])}]",
             f"- duplicate transitions: {r['duplicates']['count']:,} ({100 * r['duplicates']['fraction']:.2f}%)", "",
             "## Returns", "", "| | min | p10 | median | mean | p90 | max | std |", "|---|---|---|---|---|---|---|---|"]
    for name, key in (("return", "returns"), ("normalized score", "normalized_score")):
        s = r.get(key)
        if s:
            lines.append(f"| {name} | " + " | ".join(_fmt(s[k]) for k in ("min", "p10", "median", "mean", "p90", "max", "std")) + " |")
    lines += ["", "![returns](returns.png)", "", "## Coverage", "",
              f"- actions (bounds from {r['action_coverage']['bounds_from']}): mean per-dimension coverage {100 * r['action_coverage']['mean_coverage']:.0f}%",
              f"- states: {100 * r['state_coverage']['occupied_fraction']:.0f}% of the {r['state_coverage']['grid']}x{r['state_coverage']['grid']} PCA grid occupied",
              f"- {_predictability_text(r)}",
              "", "![actions](actions.png)", "", "![states](states.png)", "",
              f"## Quality tier: {tier['estimate'] or 'unknown'} (confidence {tier['confidence']})", "",
              f"**{tier_headline(tier)}**", ""]
    lines += [f"- {x}" for x in tier["reasons"]]
    lines += ["", f"## Recommendation: {rec['algorithm']}" + (f" (alternatives: {', '.join(rec['alternatives'])})" if rec["alternatives"] else ""), ""]
    lines += [f"- {x}" for x in rec["reasons"]]
    if r["warnings"]:
        lines += ["", "## Warnings", ""] + [f"- {w}" for w in r["warnings"]]
    return "\n".join(lines) + "\n"


def tier_headline(tier: dict) -> str:
    """``estimated tier: medium (one policy), confidence high; metadata says 'medium'``."""
    text = f"estimated tier: {tier['estimate'] or 'unknown'} ({tier['kind']}), confidence {tier['confidence']}"
    if tier.get("declared"):
        text += f"; metadata says '{tier['declared']}'" + ("" if tier.get("agrees_with_metadata") else " (disagrees)")
    return text


def _predictability_text(r: dict) -> str:
    p = r.get("action_predictability") or {}
    r2, trend = p.get("r2"), p.get("trend")
    text = "action predictability from states (held-out k-NN R^2): " + ("-" if r2 is None or r2 != r2 else f"{r2:.2f}")
    if trend is not None and trend == trend:
        text += f"; its trend along the file (Spearman): {trend:.2f}"
    within, cross = p.get("within"), p.get("cross")
    if within is not None and cross is not None and within == within and cross == cross:
        text += f"; within the file's halves {within:.2f}, across them {cross:.2f}"
    return text
