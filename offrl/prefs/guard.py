"""Guardrails against reward hacking: the rules, the live monitor and the per-run report.

Reward hacking is what happens when the policy leaves the reward model's data: the proxy reward
keeps rising while what it stood for does not. The rules compare the latest ``window`` logged
rows with the first ``window`` rows of a run:

    reward_hacking         proxy up (> 0) and true reward down (< -true_drop)
    agreement_drop         proxy up and its agreement with the true reward on the policy's own
                           samples (within-group pair agreement, else correlation) down by > agreement_drop
    ensemble_disagreement  proxy up and the reward ensemble's std on the policy's samples up by a
                           factor > disagreement_ratio
    kl_budget              objective/kl above kl_budget (when one is set)

The monitor applies them after every logged row (a warning in the training log, appended to
``<run>/guard_warnings.jsonl``); ``guard_report`` applies the same function to a finished run and
writes ``<run>/guard/{report.md, report.json, *.png}``.

Example::

    offrl prefs guard runs/ppo --kl-budget 8
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from typing import Any, Callable, Sequence

from offrl.errors import ConfigError


@dataclass(frozen=True)
class GuardRules:
    """Thresholds of the guardrails.

    window: logged rows averaged at the start and at the end of the comparison.
    true_drop: fall of the true reward (its own units) that counts as falling.
    agreement_drop: fall of the proxy-true agreement that counts as falling.
    disagreement_ratio: growth factor of the ensemble std that counts as rising.
    kl_budget: objective/kl (nats per sequence) allowed (0: no budget).
    """

    window: int = 2
    true_drop: float = 0.02
    agreement_drop: float = 0.1
    disagreement_ratio: float = 1.5
    kl_budget: float = 0.0


def _mean(rows: Sequence[dict], key: str) -> float | None:
    values = [r[key] for r in rows if key in r]
    return sum(values) / len(values) if values else None


def proxy_key(row: dict) -> str:
    """The proxy reward: the reward model's mean score (``objective/rm_mean``), else the trained-on score."""
    return "objective/rm_mean" if "objective/rm_mean" in row else "objective/scores"


def guard_warnings(history: Sequence[dict[str, Any]], rules: GuardRules = GuardRules()) -> list[dict[str, Any]]:
    """The warnings that hold at the last row of ``history`` (see the module docstring)."""
    if not history:
        return []
    last, step, out = history[-1], history[-1].get("step", len(history)), []
    if rules.kl_budget > 0 and last.get("objective/kl", 0.0) > rules.kl_budget:
        out.append({"step": step, "kind": "kl_budget",
                    "message": f"KL(pi||pi_ref) = {last['objective/kl']:.2f} nats per sequence passed the budget "
                               f"{rules.kl_budget:g}"})
    w = rules.window
    if len(history) < 2 * w:
        return out
    first, recent = history[:w], history[-w:]
    key = proxy_key(last)
    proxy_up = _mean(recent, key) - _mean(first, key)
    if proxy_up <= 0:
        return out
    true0, true1 = _mean(first, "objective/true_reward"), _mean(recent, "objective/true_reward")
    if true0 is not None and true1 is not None and true1 - true0 < -rules.true_drop:
        out.append({"step": step, "kind": "reward_hacking",
                    "message": f"reward hacking: the proxy reward rose by {proxy_up:.3f} while the true reward fell "
                               f"from {true0:.3f} to {true1:.3f}"})
    agree = "guard/pair_agreement" if "guard/pair_agreement" in last else "guard/proxy_true_correlation"
    a0, a1 = _mean(first, agree), _mean(recent, agree)
    if a0 is not None and a1 is not None and key != "objective/scores" and a1 - a0 < -rules.agreement_drop:
        out.append({"step": step, "kind": "agreement_drop",
                    "message": f"the proxy reward rose by {proxy_up:.3f} while its agreement with the true reward on "
                               f"the policy's samples ({agree}) fell from {a0:.2f} to {a1:.2f}"})
    s0, s1 = _mean(first, "objective/rm_std"), _mean(recent, "objective/rm_std")
    if s0 is not None and s1 is not None and s0 > 0 and s1 / s0 > rules.disagreement_ratio:
        out.append({"step": step, "kind": "ensemble_disagreement",
                    "message": f"the proxy reward rose by {proxy_up:.3f} while the reward ensemble's disagreement on the "
                               f"policy's samples grew from {s0:.3f} to {s1:.3f}"})
    return out


class GuardMonitor:
    """The live guardrails: after each logged row, warn (once per kind until it clears) in the log and
    in ``<out>/guard_warnings.jsonl``."""

    def __init__(self, out: str, kl_budget: float = 0.0, log: Callable[[str], None] | None = None,
                 rules: GuardRules | None = None):
        self.rules = rules or GuardRules(kl_budget=kl_budget)
        self.path = os.path.join(out, "guard_warnings.jsonl")
        self.log = log or _warn
        self.history: list[dict[str, Any]] = []
        self.active: set[str] = set()

    def restart(self, history: list[dict[str, Any]]) -> None:
        """Start from the rows of a resumed run; drop warnings logged after its last row."""
        self.history = list(history)
        last = self.history[-1]["step"] if self.history else 0
        kept = []
        if os.path.exists(self.path):
            with open(self.path) as fh:
                kept = [w for w in map(json.loads, fh) if w["step"] <= last]
        with open(self.path, "w") as fh:
            for w in kept:
                fh.write(json.dumps(w) + "\n")
        self.active = {w["kind"] for w in guard_warnings(self.history, self.rules)}

    def __call__(self, row: dict[str, Any]) -> None:
        self.history.append(row)
        warnings = guard_warnings(self.history, self.rules)
        kinds = {w["kind"] for w in warnings}
        with open(self.path, "a") as fh:
            for w in warnings:
                if w["kind"] not in self.active:
                    fh.write(json.dumps(w) + "\n")
                    self.log(f"guardrails, iteration {w['step']}: {w['message']}")
        self.active = kinds


def _warn(message: str) -> None:
    from rich.console import Console

    Console(stderr=True).print(f"[yellow]{message}[/]")


# --------------------------------------------------------------------------- the report


def _read_jsonl(path: str) -> list[dict[str, Any]]:
    if not os.path.exists(path):
        return []
    with open(path) as fh:
        return [json.loads(line) for line in fh if line.strip()]


def _reward_model_history(config: dict[str, Any]) -> list[dict[str, Any]]:
    """Held-out accuracy of the reward model over its own training, when its run folder is known."""
    path = config.get("reward_model")
    if not path:
        return []
    candidates = [path, os.path.dirname(os.path.normpath(path))]
    for folder in candidates:
        rows = [r for r in _read_jsonl(os.path.join(folder, "metrics.jsonl")) if "eval/accuracy" in r]
        if rows:
            return rows
        members = sorted(d for d in (os.listdir(folder) if os.path.isdir(folder) else []) if d.startswith("member_"))
        if members:
            return [r for r in _read_jsonl(os.path.join(folder, members[0], "metrics.jsonl")) if "eval/accuracy" in r]
    return []


def guard_report(run: str, rules: GuardRules | None = None, out: str | None = None) -> dict[str, Any]:
    """Write the guardrails report of an online RLHF run folder and return its JSON content."""
    metrics_path = os.path.join(run, "metrics.jsonl")
    history = _read_jsonl(metrics_path)
    if not history or "objective/kl" not in history[0]:
        raise ConfigError(f"{run} is not an online RLHF run folder (no metrics.jsonl with objective/kl); pass the "
                          "--out folder of `offrl prefs ppo` or `offrl prefs grpo`.")
    config = json.load(open(os.path.join(run, "config.json"))) if os.path.exists(os.path.join(run, "config.json")) else {}
    rules = rules or GuardRules(kl_budget=float(config.get("kl_budget") or 0.0))
    out = out or os.path.join(run, "guard")
    os.makedirs(out, exist_ok=True)
    warnings: list[dict[str, Any]] = []
    seen: set[str] = set()
    for k in range(1, len(history) + 1):  # the monitor's rule, replayed row by row
        now = guard_warnings(history[:k], rules)
        warnings += [w for w in now if w["kind"] not in seen]
        seen = {w["kind"] for w in now}
    rm_history = _reward_model_history(config)
    plots = _plots(history, rm_history, rules, out)
    first, last = history[0], history[-1]
    keys = ("objective/scores", "objective/rm_mean", "objective/rm_std", "objective/true_reward", "objective/kl",
            "response/length", "guard/length_correlation", "guard/proxy_true_correlation", "guard/pair_agreement")
    summary = {k: {"first": first.get(k), "last": last.get(k)} for k in keys if k in last}
    report = {"run": run, "trainer": config.get("trainer"), "reward_model": config.get("reward_model"),
              "rules": asdict(rules), "iterations": last.get("step"), "summary": summary,
              "reward_model_heldout_accuracy": [{"step": r["step"], "accuracy": r["eval/accuracy"]} for r in rm_history],
              "warnings": warnings, "plots": plots}
    with open(os.path.join(out, "report.json"), "w") as fh:
        json.dump(report, fh, indent=1)
    with open(os.path.join(out, "report.md"), "w") as fh:
        fh.write(_markdown(report))
    return report


def _markdown(report: dict[str, Any]) -> str:
    lines = [f"# Guardrails report: {report['run']}", "",
             f"trainer: {report['trainer']}; reward: {report['reward_model'] or 'programmatic'}; "
             f"iterations: {report['iterations']}", ""]
    if report["warnings"]:
        lines += ["## Warnings", ""] + [f"- iteration {w['step']}: **{w['kind']}**: {w['message']}"
                                         for w in report["warnings"]] + [""]
    else:
        lines += ["## Warnings", "", "none", ""]
    lines += ["## First vs last logged row", "", "| metric | first | last |", "|---|---|---|"]
    fmt = lambda v: "-" if v is None else f"{v:.4g}"  # noqa: E731
    for k, v in report["summary"].items():
        lines.append(f"| {k} | {fmt(v['first'])} | {fmt(v['last'])} |")
    acc = report["reward_model_heldout_accuracy"]
    if acc:
        lines += ["", f"Reward model held-out preference accuracy over its training: "
                      + ", ".join(f"{a['accuracy']:.3f} (step {a['step']})" for a in acc)]
    lines += [""] + [f"![{os.path.splitext(p)[0]}]({p})" for p in report["plots"]]
    return "\n".join(lines) + "\n"


def _plots(history, rm_history, rules: GuardRules, out: str) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [r["step"] for r in history]
    series = lambda key: [r.get(key, float("nan")) for r in history]  # noqa: E731
    panels = [
        ("rewards.png", "proxy vs true reward", [(proxy_key(history[-1]), "proxy (reward model)"),
                                                 ("objective/true_reward", "true reward")]),
        ("kl.png", "KL(pi || pi_ref) per sequence", [("objective/kl", "objective/kl")]),
        ("disagreement.png", "ensemble disagreement on the policy's samples", [("objective/rm_std", "rm std")]),
        ("length.png", "response length and reward-length correlation",
         [("response/length", "length (tokens)"), ("guard/length_correlation", "corr(proxy, length)")]),
        ("agreement.png", "proxy-true agreement on the policy's samples",
         [("guard/pair_agreement", "pair agreement"), ("guard/proxy_true_correlation", "corr(proxy, true)")]),
    ]
    written = []
    for name, title, keys in panels:
        present = [(k, label) for k, label in keys if any(k in r for r in history)]
        if not present:
            continue
        fig, ax = plt.subplots(figsize=(5.6, 3.4), dpi=110)
        for k, label in present:
            ax.plot(steps, series(k), marker="o", markersize=3, label=label)
        if name == "kl.png" and rules.kl_budget > 0:
            ax.axhline(rules.kl_budget, color="red", linestyle="--", label="KL budget")
        ax.set_xlabel("iteration")
        ax.set_title(title)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(os.path.join(out, name))
        plt.close(fig)
        written.append(name)
    if rm_history:
        fig, ax = plt.subplots(figsize=(5.6, 3.4), dpi=110)
        ax.plot([r["step"] for r in rm_history], [r["eval/accuracy"] for r in rm_history], marker="o")
        ax.set_xlabel("reward-model training step")
        ax.set_title("reward model: held-out preference accuracy")
        ax.grid(alpha=0.3)
        fig.tight_layout()
        fig.savefig(os.path.join(out, "rm_accuracy.png"))
        plt.close(fig)
        written.append("rm_accuracy.png")
    return written
