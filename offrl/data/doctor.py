"""The dataset doctor: what is in an offline dataset, how good it is, and what to train on it.

``inspect_dataset(ds)`` returns a JSON-serialisable report; :func:`render` prints it with
rich, :func:`write_report` saves PNG plots and ``summary.md``.

Quality tier rule
-----------------
Per-episode normalized scores ``s = 100 (R - R_random) / (R_expert - R_random)`` (D4RL,
Fu et al. 2020) are used when reference returns are known (dataset metadata
``ref_min_score``/``ref_max_score``, D4RL's table, or offrl's measured references). Three
more signals: the *spread* ``p90 - p10`` of the scores; the *trend*, Spearman's rank
correlation between episode order and return (a replay buffer is stored in the order an
improving learner produced it); and *i.i.d. actions*, a lag-1 autocorrelation of the
actions within episodes below 0.2 (uniform noise has none, a policy acting on a smoothly
changing state has plenty). In order:

1. **random**: median score ``< 15`` and either i.i.d. actions or a spread ``<= 30``.
2. **mixture** (two return modes): split the sorted scores where the between-group
   variance is largest (Otsu's threshold). Bimodal when both groups hold at least 10% of the
   episodes (and 5 episodes), Ashman's ``D = sqrt(2) |mu_hi - mu_lo| / sqrt(sd_lo^2 + sd_hi^2) >= 4``
   (a flat spread has ``D = 3.5``, a normal one 2.7) and the middle third between the two
   group means holds under 8% of the episodes. Upper group ``>= 75``: *medium-expert*;
   otherwise *medium-replay*.
3. **medium-replay**: spread ``> 30`` points and either a rising trend (Spearman ``>= 0.3``)
   or a median ``< 15`` with policy-like actions.
4. **level** of the median score: ``>= 85`` *expert*, else *medium*. A wide spread without a
   trend is read as one policy whose return depends on the start state (e.g. Pendulum).

Without reference returns the level is unknown: i.i.d. actions whose per-dimension
histograms are nearly flat (entropy ``>= 0.9 log(bins)``) mark *random* data; then step 2 on
raw returns (*medium-expert*), then a wide relative spread with a rising trend
(*medium-replay*), else *medium*; such estimates have confidence ``low``. Confidence is
``high`` only with references, at least 20 episodes, and (for the level tiers) a median more
than 5 points from a threshold; otherwise ``medium``.

Recommendation (the dataset-quality table): narrow expert data -> BC or TD3+BC; medium or
mixed suboptimal data -> IQL; low-coverage random data -> a conservative method (CQL).

Example::

    from offrl.data import load
    from offrl.data.doctor import inspect_dataset, render
    report = inspect_dataset(load("hopper-medium-v0"))
    report["tier"]["estimate"], report["recommendation"]["algorithm"]
    render(report)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from offrl.data.dataset import Dataset

TIERS = ("random", "medium", "medium-replay", "medium-expert", "expert")
RANDOM_BELOW = 15.0
EXPERT_FROM = 85.0
REPLAY_SPREAD = 30.0
MIXTURE_HIGH_FROM = 75.0
TREND_FROM = 0.3
IID_AUTOCORR_BELOW = 0.2
BIMODAL_D_FROM = 4.0
ACTION_BINS = 20
PCA_GRID = 32
MAX_PCA_POINTS = 20_000
SPARK = "▁▂▃▄▅▆▇█"


# ---------------------------------------------------------------------- statistics
def _stats(x) -> dict:
    x = np.asarray(x, dtype=np.float64)
    if x.size == 0:
        return {}
    q = np.percentile(x, [10, 25, 50, 75, 90])
    return {"min": float(x.min()), "p10": float(q[0]), "p25": float(q[1]), "median": float(q[2]),
            "mean": float(x.mean()), "p75": float(q[3]), "p90": float(q[4]), "max": float(x.max()),
            "std": float(x.std())}


def _histogram(x, bins=20) -> dict:
    x = np.asarray(x, dtype=np.float64)
    lo, hi = (float(x.min()), float(x.max())) if x.size else (0.0, 1.0)
    if hi <= lo:
        lo, hi = lo - 0.5, hi + 0.5
    counts, edges = np.histogram(x, bins=bins, range=(lo, hi))
    return {"edges": edges.tolist(), "counts": counts.tolist()}


def bimodality(values) -> dict:
    """Otsu split of ``values`` into two groups, Ashman's D and the middle-third mass."""
    x = np.sort(np.asarray(values, dtype=np.float64))
    n = len(x)
    out = {"bimodal": False, "ashman_d": 0.0, "middle_fraction": 1.0, "low_mean": None, "high_mean": None,
           "low_fraction": None}
    if n < 6 or x[-1] - x[0] <= 1e-12:
        return out
    csum = np.cumsum(x)
    k = np.arange(1, n)
    mean_lo = csum[:-1] / k
    mean_hi = (csum[-1] - csum[:-1]) / (n - k)
    between = k * (n - k) * (mean_hi - mean_lo) ** 2
    split = int(np.argmax(between)) + 1
    lo, hi = x[:split], x[split:]
    sd = np.sqrt(lo.var() + hi.var())
    d = float(np.sqrt(2) * (hi.mean() - lo.mean()) / max(sd, 1e-12))
    third = (hi.mean() - lo.mean()) / 3.0
    middle = float(np.mean((x > lo.mean() + third) & (x < hi.mean() - third)))
    frac = split / n
    out.update(ashman_d=min(d, 1e6), middle_fraction=middle, low_mean=float(lo.mean()), high_mean=float(hi.mean()),
               low_fraction=float(frac),
               bimodal=bool(min(split, n - split) >= max(5, 0.10 * n) and d >= BIMODAL_D_FROM and middle < 0.08))
    return out


def action_autocorrelation(ds: Dataset) -> float:
    """Mean lag-1 correlation of each action dimension between consecutive steps of an episode."""
    if len(ds) < 3:
        return float("nan")
    act = ds.actions.reshape(len(ds), -1).astype(np.float64)
    same_episode = ~ds.dones[:-1]
    a, b = act[:-1][same_episode], act[1:][same_episode]
    if len(a) < 2:
        return float("nan")
    a = a - a.mean(axis=0)
    b = b - b.mean(axis=0)
    denom = np.sqrt((a ** 2).sum(axis=0) * (b ** 2).sum(axis=0))
    corr = np.where(denom > 0, (a * b).sum(axis=0) / np.maximum(denom, 1e-300), 0.0)
    return float(np.mean(corr))


def action_coverage(ds: Dataset, bins: int = ACTION_BINS) -> dict:
    """Per-dimension histogram over the action box and the fraction of its bins visited.

    A bin counts as visited when it holds at least 0.1% of the actions (and at least one).
    Bounds come from metadata ``action_low``/``action_high`` or the env; if neither is known
    the observed range is used and the coverage only describes the shape.
    """
    from offrl.data.checks import action_bounds, count_out_of_bounds

    act = ds.actions.reshape(len(ds), -1).astype(np.float64)
    bounds = action_bounds(ds)
    source = "metadata" if ("action_low" in ds.metadata and "action_high" in ds.metadata) else "env"
    if bounds is not None:
        low, high = bounds[0].reshape(-1), bounds[1].reshape(-1)
        if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high))):
            bounds = None
    if bounds is None:
        source = "data"
        low, high = act.min(axis=0), act.max(axis=0)
    high = np.where(high > low, high, low + 1.0)
    threshold = max(1, int(np.ceil(0.001 * len(act))))
    per_dim = []
    for j in range(act.shape[1]):
        counts, _ = np.histogram(np.clip(act[:, j], low[j], high[j]), bins=bins, range=(low[j], high[j]))
        p = counts / max(1, counts.sum())
        entropy = float(-(p[p > 0] * np.log(p[p > 0])).sum() / np.log(bins))
        width = high[j] - low[j]
        saturated = float(np.mean((act[:, j] <= low[j] + 0.01 * width) | (act[:, j] >= high[j] - 0.01 * width)))
        per_dim.append({"dim": j, "coverage": float(np.mean(counts >= threshold)), "entropy": entropy,
                        "mean": float(act[:, j].mean()), "std": float(act[:, j].std()),
                        "saturated_fraction": saturated, "counts": counts.tolist()})
    out_of_bounds = count_out_of_bounds(ds, bounds)[0] if source != "data" else 0
    return {"bounds_from": source, "low": low.tolist(), "high": high.tolist(), "bins": bins,
            "visited_threshold": threshold, "per_dim": per_dim,
            "mean_coverage": float(np.mean([d["coverage"] for d in per_dim])) if per_dim else 0.0,
            "mean_entropy": float(np.mean([d["entropy"] for d in per_dim])) if per_dim else 0.0,
            "out_of_bounds": int(out_of_bounds)}


def state_coverage(ds: Dataset, grid: int | None = None, max_points: int = MAX_PCA_POINTS, seed: int = 0) -> dict:
    """2-D PCA of standardised observations and the occupied fraction of a ``grid x grid`` box.

    The box spans the 1st-99th percentile of each projected axis; ``density`` holds the
    counts (row = PC2, column = PC1). The grid has ``clip(sqrt(points / 20), 4, 32)`` cells
    a side, so that evenly spread states would put about 20 in each cell and the occupied
    fraction means the same for small and large datasets. ``dims_for_90pct`` is the number
    of principal components that explain 90% of the variance.
    """
    obs = ds.observations.reshape(len(ds), -1).astype(np.float64)
    rng = np.random.default_rng(seed)
    if len(obs) > max_points:
        obs = obs[rng.choice(len(obs), max_points, replace=False)]
    if grid is None:
        grid = int(np.clip(np.sqrt(len(obs) / 20), 4, PCA_GRID))
    z = (obs - obs.mean(axis=0)) / (obs.std(axis=0) + 1e-8)
    _, sing, vt = np.linalg.svd(z, full_matrices=False)
    var = sing ** 2
    ratio = var / var.sum() if var.sum() > 0 else np.zeros_like(var)
    comps = vt[:2] if vt.shape[0] >= 2 else np.vstack([vt[:1], np.zeros((1, vt.shape[1]))])
    proj = z @ comps.T
    lo = np.percentile(proj, 1, axis=0)
    hi = np.percentile(proj, 99, axis=0)
    hi = np.where(hi > lo, hi, lo + 1.0)
    density, xedges, yedges = np.histogram2d(proj[:, 0], proj[:, 1], bins=grid, range=[[lo[0], hi[0]], [lo[1], hi[1]]])
    return {"points": int(len(obs)), "explained_variance": [float(r) for r in ratio[:2]],
            "dims_for_90pct": int(np.searchsorted(np.cumsum(ratio), 0.9) + 1) if ratio.sum() > 0 else 0,
            "grid": grid, "occupied_fraction": float(np.mean(density > 0)),
            "x_range": [float(lo[0]), float(hi[0])], "y_range": [float(lo[1]), float(hi[1])],
            "density": density.T.astype(int).tolist()}


def duplicate_transitions(ds: Dataset) -> dict:
    """Exact duplicate rows of ``(s, a, r, s', terminal, timeout)``.

    Rows are first hashed to 64 bits (multiply-xor over their 8-byte words); only rows whose
    hash repeats are compared byte for byte, so the count is exact and the cost is one pass.
    """
    n = len(ds)
    cols = [ds.observations.reshape(n, -1), ds.actions.reshape(n, -1), ds.rewards.reshape(n, 1),
            ds.next_observations.reshape(n, -1), ds.terminals.reshape(n, 1), ds.timeouts.reshape(n, 1)]
    rows = np.concatenate([c.astype(np.float32) for c in cols], axis=1)
    if rows.shape[1] % 2:
        rows = np.concatenate([rows, np.zeros((n, 1), np.float32)], axis=1)
    rows = np.ascontiguousarray(rows)
    words = rows.view(np.uint64)
    h = np.full(n, np.uint64(1469598103934665603))
    prime = np.uint64(1099511628211)
    with np.errstate(over="ignore"):
        for j in range(words.shape[1]):
            h = (h ^ words[:, j]) * prime
    _, inverse, counts = np.unique(h, return_inverse=True, return_counts=True)
    candidates = np.flatnonzero(counts[inverse] > 1)
    duplicates = 0
    if len(candidates):
        sub = np.ascontiguousarray(rows[candidates])
        keys = sub.view(np.dtype((np.void, sub.dtype.itemsize * sub.shape[1]))).reshape(-1)
        duplicates = len(candidates) - len(np.unique(keys))
    return {"count": int(duplicates), "fraction": float(duplicates / max(n, 1))}


# ---------------------------------------------------------------------- tier and advice
def return_trend(returns) -> float:
    """Spearman rank correlation between episode order and return (``nan`` under 10 episodes).

    A replay buffer stores episodes in the order an improving learner produced them, so its
    returns rise along the file; a fixed policy's returns do not.
    """
    r = np.asarray(returns, dtype=np.float64)
    if len(r) < 10 or np.ptp(r) == 0:
        return float("nan")
    ranks = np.empty(len(r))
    ranks[np.argsort(r, kind="stable")] = np.arange(len(r))
    order = np.arange(len(r), dtype=np.float64)
    return float(np.corrcoef(order, ranks)[0, 1])


def estimate_tier(returns, scores=None, action_autocorr=float("nan"), action_entropy=0.0) -> dict:
    """Quality tier from per-episode returns (and normalized scores when known); see the module rule."""
    returns = np.asarray(returns, dtype=np.float64)
    reasons: list[str] = []
    n = len(returns)
    trend = return_trend(returns)
    rising = bool(np.isfinite(trend) and trend >= TREND_FROM)
    iid = bool(np.isfinite(action_autocorr) and action_autocorr < IID_AUTOCORR_BELOW)
    if scores is not None:
        s = np.asarray(scores, dtype=np.float64)
        med = float(np.median(s))
        spread = float(np.percentile(s, 90) - np.percentile(s, 10))
        bi = bimodality(s)
        if med < RANDOM_BELOW and (iid or spread <= REPLAY_SPREAD):
            tier = "random"
            why = (f"actions look i.i.d. (lag-1 autocorrelation {action_autocorr:.2f})" if iid
                   else f"a narrow spread ({spread:.0f} points)")
            reasons.append(f"median normalized score {med:.1f} < {RANDOM_BELOW:.0f} with {why}: close to a random policy")
        elif bi["bimodal"]:
            if bi["high_mean"] >= MIXTURE_HIGH_FROM:
                tier = "medium-expert"
                reasons.append(f"returns are bimodal: {100 * (1 - bi['low_fraction']):.0f}% of episodes score about {bi['high_mean']:.0f} and the rest about {bi['low_mean']:.0f} (Ashman's D {bi['ashman_d']:.1f})")
            else:
                tier = "medium-replay"
                reasons.append(f"returns are bimodal but even the better group scores only about {bi['high_mean']:.0f} (Ashman's D {bi['ashman_d']:.1f}): a mixture of suboptimal policies")
        elif spread > REPLAY_SPREAD and (rising or med < RANDOM_BELOW):
            tier = "medium-replay"
            if rising:
                reasons.append(f"normalized scores spread widely (p10-p90 {spread:.0f} points > {REPLAY_SPREAD:.0f}) and rise along the episode order (Spearman {trend:.2f}), as a replay buffer of an improving learner does")
            else:
                reasons.append(f"scores spread widely (p10-p90 {spread:.0f} points) up from a low median ({med:.1f}) with policy-like, not i.i.d., actions: a mix of early and better policies")
        elif med >= EXPERT_FROM:
            tier = "expert"
            reasons.append(f"median normalized score {med:.1f} >= {EXPERT_FROM:.0f} (p10-p90 spread {spread:.0f} points)")
        else:
            tier = "medium"
            reasons.append(f"median normalized score {med:.1f} lies between {RANDOM_BELOW:.0f} and {EXPERT_FROM:.0f} (p10-p90 spread {spread:.0f} points)")
        if tier in ("medium", "expert") and spread > REPLAY_SPREAD:
            reasons.append(f"the scores spread widely ({spread:.0f} points) but do not rise along the episode order, which reads as one policy whose return depends on the start state")
        near = min(abs(med - RANDOM_BELOW), abs(med - EXPERT_FROM))
        confidence = "high" if n >= 20 and (near > 5 or tier in ("medium-replay", "medium-expert")) else "medium"
        if n < 20:
            reasons.append(f"only {n} episodes, so the return distribution is rough")
        return {"estimate": tier, "confidence": confidence, "reasons": reasons, "normalized": True,
                "median_score": med, "score_spread": spread, "return_trend": None if not np.isfinite(trend) else trend,
                "bimodality": bi}

    reasons.append("reference returns for this environment are unknown, so the estimate is uncertain (pass --env or add ref_min_score/ref_max_score to the metadata)")
    bi = bimodality(returns)
    scale = max(abs(float(np.percentile(returns, 90))), abs(float(np.percentile(returns, 10))), 1e-8) if n else 1.0
    rel_spread = float(np.percentile(returns, 90) - np.percentile(returns, 10)) / scale if n else 0.0
    if iid and action_entropy >= 0.9:
        tier = "random"
        reasons.append(f"actions look i.i.d. uniform (lag-1 autocorrelation {action_autocorr:.2f}, histogram entropy {action_entropy:.2f} of the maximum)")
    elif bi["bimodal"]:
        tier = "medium-expert"
        reasons.append(f"returns are bimodal (groups near {bi['low_mean']:.4g} and {bi['high_mean']:.4g}, Ashman's D {bi['ashman_d']:.1f}): a mixture of a weaker and a stronger policy")
    elif rel_spread > 0.5 and rising:
        tier = "medium-replay"
        reasons.append(f"returns spread widely (p10-p90 is {100 * rel_spread:.0f}% of their magnitude) and rise along the episode order (Spearman {trend:.2f}), as a replay buffer does")
    else:
        tier = "medium"
        reasons.append("returns show neither two modes nor a rising trend; without references medium and expert cannot be told apart")
    return {"estimate": tier, "confidence": "low", "reasons": reasons, "normalized": False,
            "median_score": None, "score_spread": None, "return_trend": None if not np.isfinite(trend) else trend,
            "bimodality": bi}


def recommend(tier: dict, coverage: dict | None = None) -> dict:
    """The algorithm the dataset-quality table suggests for this tier, with reasons."""
    t = tier["estimate"]
    if t == "expert" and (tier.get("score_spread") or 0.0) > REPLAY_SPREAD:
        algo, alts = "TD3+BC", ["BC"]
        reasons = [f"near-expert data with a wide spread of scores ({tier['score_spread']:.0f} points): TD3+BC's value term lets it prefer the better episodes while its BC term keeps it close to the data",
                   "plain BC also imitates the weaker episodes"]
    elif t == "expert":
        algo, alts = "BC", ["TD3+BC"]
        reasons = ["narrow, near-expert data: behaviour cloning copies the good behaviour directly",
                   "TD3+BC adds a value term on top of the BC term and is the safer choice if some episodes are weaker"]
    elif t == "random":
        algo, alts = "CQL", ["IQL"]
        reasons = ["low-return random data: cloning it reproduces random behaviour, and the values of actions the data rarely shows are easily over-estimated",
                   "CQL's conservative penalty pushes down Q-values of unseen actions, which matters most when coverage of good states is low"]
        if coverage is not None and coverage.get("occupied_fraction", 1.0) < 0.3:
            reasons.append(f"state coverage is low ({100 * coverage['occupied_fraction']:.0f}% of the PCA grid occupied)")
    else:
        algo = "IQL"
        alts = ["TD3+BC"] if t in ("medium", "medium-expert") else ["CQL", "TD3+BC"]
        kind = {"medium": "suboptimal single-policy", "medium-replay": "mixed-quality replay",
                "medium-expert": "mixed medium and expert"}[t]
        reasons = [f"{kind} data: IQL learns values in-sample with an expectile loss, so it improves on the behaviour policy without querying actions outside the data",
                   "its advantage-weighted policy extraction keeps the better actions and down-weights the worse episodes"]
    if tier.get("confidence") == "low":
        reasons.append("the tier estimate is uncertain; IQL is the most robust default across tiers if in doubt")
    return {"algorithm": algo, "alternatives": alts, "reasons": reasons}


# ---------------------------------------------------------------------- the report
def inspect_dataset(ds: Dataset, env_id: str | None = None, seed: int = 0) -> dict[str, Any]:
    """A JSON-serialisable report on ``ds``: sizes, returns, rewards, coverage, duplicates, tier, advice."""
    from offrl.envs import check_env_id, normalized_score, reference_returns

    check_env_id(env_id, "env_id")
    md = dict(ds.metadata)
    env_id = env_id or md.get("env_id")
    lengths = ds.episode_lengths()
    returns = ds.episode_returns()
    refs = None
    scores = None
    if env_id or ("ref_min_score" in md and "ref_max_score" in md):
        refs = reference_returns(env_id or "", md)
        if refs is not None:
            scores = normalized_score(env_id or "", returns, md)
    starts, ends = ds.episode_bounds()
    last = ends - 1
    coverage = action_coverage(ds)
    states = state_coverage(ds, seed=seed)
    autocorr = action_autocorrelation(ds)
    tier = estimate_tier(returns, scores, autocorr, coverage["mean_entropy"])
    declared = md.get("tier")
    tier["declared"] = declared
    duplicates = duplicate_transitions(ds)
    rewards = ds.rewards.astype(np.float64)
    report: dict[str, Any] = {
        "source": ds.source,
        "env_id": env_id,
        "metadata": {k: md[k] for k in ("env_id", "tier", "generator", "seed", "policy_return", "minari_dataset_id",
                                        "algorithm_name", "next_observations") if k in md},
        "transitions": len(ds),
        "episodes": int(len(starts)),
        "obs_dim": ds.obs_dim,
        "action_dim": ds.action_dim,
        "infos": sorted(ds.infos),
        "episode_length": _stats(lengths),
        "returns": {**_stats(returns), "histogram": _histogram(returns)},
        "reference_returns": {"random": refs[0], "expert": refs[1]} if refs else None,
        "normalized_score": ({**_stats(scores), "histogram": _histogram(scores)} if scores is not None else None),
        "rewards": {"mean": float(rewards.mean()), "std": float(rewards.std()), "min": float(rewards.min()),
                    "max": float(rewards.max()), "abs_max": float(np.abs(rewards).max())},
        "terminals": int(ds.terminals.sum()),
        "timeouts": int(ds.timeouts.sum()),
        "episodes_ending_in_terminal": int(ds.terminals[last].sum()),
        "episodes_ending_in_timeout": int(ds.timeouts[last].sum()),
        "action_coverage": coverage,
        "action_autocorrelation": None if not np.isfinite(autocorr) else autocorr,
        "state_coverage": states,
        "duplicates": duplicates,
        "tier": tier,
    }
    report["recommendation"] = recommend(tier, states)
    report["warnings"] = _warnings(report)
    return json.loads(json.dumps(report, default=_json_default))


def _json_default(obj):
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    raise TypeError(type(obj).__name__)


def _warnings(r: dict) -> list[str]:
    out = []
    if r["transitions"] < 10_000:
        out.append(f"only {r['transitions']} transitions: offline RL results on this little data vary a lot between seeds")
    if r["episodes"] < 10:
        out.append(f"only {r['episodes']} episodes: return statistics and the tier estimate are rough")
    if r["duplicates"]["fraction"] > 0.01:
        out.append(f"{r['duplicates']['count']} duplicate transitions ({100 * r['duplicates']['fraction']:.1f}%): the data may have been concatenated twice")
    if r["action_coverage"]["out_of_bounds"]:
        out.append(f"{r['action_coverage']['out_of_bounds']} actions lie outside the action bounds: clip them before training")
    if r["rewards"]["std"] == 0:
        out.append("every reward is the same: value-based methods cannot learn from it; use BC")
    if r["rewards"]["abs_max"] > 100:
        out.append(f"large rewards (|r| up to {r['rewards']['abs_max']:.3g}): consider reward scaling")
    if r["terminals"] == 0 and r["timeouts"] == 0:
        out.append("no terminals or timeouts: the whole dataset is one episode")
    declared = r["tier"].get("declared")
    if declared and declared != r["tier"]["estimate"]:
        out.append(f"metadata says tier '{declared}' but the returns look '{r['tier']['estimate']}'")
    return out


# ---------------------------------------------------------------------- rendering
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

    ac = r["action_coverage"]
    t = Table(title=f"Action coverage (bounds from {ac['bounds_from']}, {ac['bins']} bins, visited = >= {ac['visited_threshold']} actions)")
    for col in ("dim", "low", "high", "mean", "std", "coverage", "at bounds"):
        t.add_column(col, justify="right")
    t.add_column("histogram (low..high)", no_wrap=True, min_width=20)
    for d in ac["per_dim"][:32]:
        j = d["dim"]
        t.add_row(str(j), _fmt(ac["low"][j], 3), _fmt(ac["high"][j], 3), _fmt(d["mean"], 3), _fmt(d["std"], 3),
                  f"{100 * d['coverage']:.0f}%", f"{100 * d['saturated_fraction']:.0f}%", sparkline(d["counts"]))
    console.print(t)
    sc = r["state_coverage"]
    console.print(f"  state coverage: {100 * sc['occupied_fraction']:.0f}% of a {sc['grid']}x{sc['grid']} grid over the first two principal "
                  f"components (explain {100 * sum(sc['explained_variance']):.0f}% of the variance; {sc['dims_for_90pct']} components explain 90%)")
    if r["action_autocorrelation"] is not None:
        console.print(f"  action lag-1 autocorrelation: {r['action_autocorrelation']:.2f}")

    tier = r["tier"]
    rec = r["recommendation"]
    body = [f"[bold]estimated tier: {tier['estimate']}[/bold] (confidence {tier['confidence']}"
            + (f", metadata says '{tier['declared']}'" if tier.get("declared") else "") + ")"]
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
    ax.set_title(f"Episode returns: {r['episodes']} episodes, tier estimate '{r['tier']['estimate']}'")
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
              "", "![actions](actions.png)", "", "![states](states.png)", "",
              f"## Quality tier: {tier['estimate']} (confidence {tier['confidence']})", ""]
    lines += [f"- {x}" for x in tier["reasons"]]
    lines += ["", f"## Recommendation: {rec['algorithm']}" + (f" (alternatives: {', '.join(rec['alternatives'])})" if rec["alternatives"] else ""), ""]
    lines += [f"- {x}" for x in rec["reasons"]]
    if r["warnings"]:
        lines += ["", "## Warnings", ""] + [f"- {w}" for w in r["warnings"]]
    return "\n".join(lines) + "\n"
