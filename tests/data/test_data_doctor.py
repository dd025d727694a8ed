"""The dataset doctor on synthetic datasets built to look like each quality tier."""

import json

import numpy as np
import pytest

from offrl.data import Dataset
from offrl.data.doctor import (action_autocorrelation, action_coverage, bimodality, duplicate_transitions,
                               estimate_tier, inspect_dataset, recommend, render, sparkline, state_coverage,
                               write_report)
from offrl.envs import D4RL_REFERENCE_RETURNS

LO, HI = D4RL_REFERENCE_RETURNS["hopper"]


def tier_dataset(scores, smooth=True, env_id="Hopper-v5", steps=40, seed=0):
    """Episodes whose returns hit the given normalized ``scores``; smooth (policy) or i.i.d. uniform actions."""
    rng = np.random.default_rng(seed)
    obs, nxt, act, rew, term, tout = [], [], [], [], [], []
    for s in scores:
        ret = LO + s / 100.0 * (HI - LO)
        seq = np.cumsum(rng.normal(size=(steps + 1, 11)), axis=0).astype(np.float32)
        obs.append(seq[:-1])
        nxt.append(seq[1:])
        if smooth:
            t = np.arange(steps)[:, None]
            a = np.tanh(1.5 * np.sin(0.15 * t + rng.uniform(0, 6, size=(1, 3))))
        else:
            a = rng.uniform(-1, 1, size=(steps, 3))
        act.append(a.astype(np.float32))
        rew.append(np.full(steps, ret / steps, np.float32))
        term.append(np.zeros(steps, bool))
        e = np.zeros(steps, bool)
        e[-1] = True
        tout.append(e)
    return Dataset.from_arrays(np.concatenate(obs), np.concatenate(act), np.concatenate(rew), np.concatenate(term),
                               np.concatenate(tout), np.concatenate(nxt),
                               metadata={"env_id": env_id, "action_low": [-1.0] * 3, "action_high": [1.0] * 3})


rng = np.random.default_rng(1)
CASES = {
    "random": (rng.normal(2, 2, 40), False),
    "medium": (rng.normal(45, 4, 40), True),
    "expert": (rng.normal(100, 3, 40), True),
    "medium-expert": (np.concatenate([rng.normal(45, 4, 20), rng.normal(100, 3, 20)]), True),
    # a replay buffer: scores rise (noisily) along the episode order
    "medium-replay": (np.linspace(0, 60, 60) + rng.normal(0, 8, 60), True),
}
ADVICE = {"random": "CQL", "medium": "IQL", "expert": "BC", "medium-expert": "IQL", "medium-replay": "IQL"}


@pytest.mark.parametrize("tier", sorted(CASES))
def test_tier_estimate_and_recommendation(tier):
    scores, smooth = CASES[tier]
    report = inspect_dataset(tier_dataset(scores, smooth))
    assert report["tier"]["estimate"] == tier, report["tier"]
    assert report["tier"]["confidence"] == "high"
    assert report["recommendation"]["algorithm"] == ADVICE[tier]
    np.testing.assert_allclose(report["normalized_score"]["median"], np.median(scores), atol=0.05)
    json.dumps(report)  # JSON-serialisable as returned


def test_expert_advice_names_bc_and_td3bc_and_random_advice_is_conservative():
    expert = recommend({"estimate": "expert", "confidence": "high"})
    assert expert["algorithm"] == "BC" and expert["alternatives"] == ["TD3+BC"]
    wide = recommend({"estimate": "expert", "confidence": "high", "score_spread": 40.0})
    assert wide["algorithm"] == "TD3+BC" and "40 points" in wide["reasons"][0]
    random = recommend({"estimate": "random", "confidence": "high"}, {"occupied_fraction": 0.1})
    assert random["algorithm"] == "CQL" and any("conservative" in r for r in random["reasons"])
    assert any("10% of the PCA grid" in r for r in random["reasons"])


def test_without_references_the_estimate_is_uncertain():
    random_like = inspect_dataset(tier_dataset(CASES["random"][0], smooth=False, env_id="MyRobot-v0"))
    assert random_like["normalized_score"] is None and random_like["reference_returns"] is None
    assert random_like["tier"]["estimate"] == "random" and random_like["tier"]["confidence"] == "low"
    assert "uncertain" in random_like["tier"]["reasons"][0]
    policy_like = inspect_dataset(tier_dataset(CASES["expert"][0], smooth=True, env_id="MyRobot-v0"))
    assert policy_like["tier"]["estimate"] == "medium" and policy_like["tier"]["confidence"] == "low"
    assert any("IQL is the most robust default" in r for r in policy_like["recommendation"]["reasons"])


def test_env_argument_supplies_references():
    ds = tier_dataset(CASES["expert"][0], env_id="MyRobot-v0")
    assert inspect_dataset(ds, env_id="Hopper-v5")["tier"]["estimate"] == "expert"


def test_wide_spread_without_trend_is_one_policy_not_a_replay_buffer():
    scores = rng.permutation(np.linspace(40, 80, 60))   # like Pendulum: the start state moves the return a lot
    tier = inspect_dataset(tier_dataset(scores))["tier"]
    assert tier["estimate"] == "medium" and abs(tier["return_trend"]) < 0.3
    assert any("start state" in r for r in tier["reasons"])
    assert inspect_dataset(tier_dataset(np.sort(scores)))["tier"]["estimate"] == "medium-replay"


def test_low_scores_with_policy_actions_and_wide_spread_are_replay_not_random():
    scores = rng.permutation(np.concatenate([rng.normal(3, 2, 40), rng.uniform(10, 60, 20)]))
    assert inspect_dataset(tier_dataset(scores, smooth=True))["tier"]["estimate"] == "medium-replay"
    assert inspect_dataset(tier_dataset(scores, smooth=False))["tier"]["estimate"] == "random"


def test_return_trend_hand_computed():
    from offrl.data.doctor import return_trend

    assert return_trend(np.arange(12.0)) == pytest.approx(1.0)
    assert return_trend(np.arange(12.0)[::-1]) == pytest.approx(-1.0)
    assert np.isnan(return_trend(np.arange(5.0)))


def test_bimodality_hand_computed():
    two = bimodality([0] * 5 + [10] * 5)
    assert two["bimodal"] and two["low_mean"] == 0 and two["high_mean"] == 10 and two["middle_fraction"] == 0
    assert not bimodality([0] * 4 + [10] * 4)["bimodal"]   # each mode needs at least 5 episodes
    flat = bimodality(np.linspace(0, 1, 1001))
    # a flat spread splits in halves: D = sqrt(2) (w/2) / sqrt(2 w^2 / 48) = sqrt(48) / 2
    assert flat["ashman_d"] == pytest.approx(np.sqrt(48) / 2, rel=1e-2)
    assert flat["middle_fraction"] == pytest.approx(1 / 6, abs=0.01) and not flat["bimodal"]
    assert estimate_tier(np.zeros(3), np.array([50.0, 50.0, 50.0]))["estimate"] == "medium"


def test_action_coverage_hand_computed():
    n = 1000
    act = np.linspace(0.0, 0.4999, n, dtype=np.float32)[:, None]
    ds = Dataset.from_arrays(np.zeros((n, 2)), act, np.zeros(n), np.zeros(n), next_observations=np.zeros((n, 2)),
                             metadata={"action_low": [-1.0], "action_high": [1.0]})
    cov = action_coverage(ds)
    assert cov["bounds_from"] == "metadata"
    assert cov["per_dim"][0]["coverage"] == pytest.approx(5 / 20)   # bins [0, 0.1) ... [0.4, 0.5)
    assert sum(cov["per_dim"][0]["counts"]) == n
    assert action_coverage(ds.replace(metadata={}))["bounds_from"] == "data"


def test_autocorrelation_separates_policies_from_noise():
    assert action_autocorrelation(tier_dataset([50] * 10, smooth=True)) > 0.8
    assert abs(action_autocorrelation(tier_dataset([50] * 10, smooth=False))) < 0.1


def test_duplicates_are_counted():
    ds = tier_dataset([50] * 5)
    assert duplicate_transitions(ds)["count"] == 0
    twice = Dataset.concatenate([ds, ds])
    assert duplicate_transitions(twice) == {"count": len(ds), "fraction": 0.5}
    assert any("duplicate transitions" in w for w in inspect_dataset(twice)["warnings"])


def test_state_coverage_shapes():
    sc = state_coverage(tier_dataset([50] * 20))
    assert sc["grid"] == int(np.sqrt(800 / 20)) and len(sc["density"]) == sc["grid"]
    assert sum(map(sum, sc["density"])) <= 800 and 0 < sc["occupied_fraction"] <= 1
    assert 0 < sum(sc["explained_variance"]) <= 1


def test_declared_tier_mismatch_is_a_warning():
    ds = tier_dataset(CASES["random"][0], smooth=False)
    ds = ds.replace(metadata={**ds.metadata, "tier": "expert"})
    assert any("metadata says tier 'expert'" in w for w in inspect_dataset(ds)["warnings"])


def test_render_and_report_files(tmp_path):
    report = inspect_dataset(tier_dataset(CASES["medium-expert"][0]))
    from rich.console import Console

    console = Console(record=True, width=120)
    render(report, console)
    text = console.export_text()
    assert "estimated tier: medium-expert" in text and "recommendation: IQL" in text
    files = write_report(report, tmp_path / "rep")
    for key in ("returns", "actions", "states"):
        assert open(files[key], "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    summary = open(files["summary"]).read()
    assert "## Quality tier: medium-expert" in summary and "## Recommendation: IQL" in summary
    assert json.load(open(files["json"]))["tier"]["estimate"] == "medium-expert"


def test_sparkline():
    assert sparkline([0, 1, 2, 4]) == " ▂▄█"
