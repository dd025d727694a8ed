"""The dataset doctor: its statistics against hand-computed numbers, and its estimate of the
kind and level of data on every bundled Pendulum tier, on scripted-policy tiers it was not tuned
on (tests/data/pendulum_tiers.py), without reference returns, and on mislabelled files."""

import json

import numpy as np
import pytest

import offrl.data as offrl_data
from offrl.data import Dataset
from offrl.data.doctor import (action_autocorrelation, action_coverage, action_predictability, behavior_shift, bimodality,
                               duplicate_transitions, inspect_dataset, recommend, render, return_order_fit,
                               kind_of_data, spearman, sparkline, state_coverage, write_report)
from offrl.data.doctor.tier import KINDS_OF_TIER
from pendulum_tiers import KIND_OF, pendulum_tier, rollout, uniform

BUNDLED = {"pendulum-random-v0": "random", "pendulum-medium-v0": "medium", "pendulum-medium-replay-v0": "medium-replay",
           "pendulum-medium-expert-v0": "medium-expert", "pendulum-expert-v0": "expert", "hopper-medium-20k-v0": "medium"}


def tier_dataset(scores, smooth=True, steps=40, seed=0):
    """Episodes with the given returns and random-walk states (for shape and plumbing tests only)."""
    rng = np.random.default_rng(seed)
    obs, nxt, act, rew, tout = [], [], [], [], []
    for s in scores:
        seq = np.cumsum(rng.normal(size=(steps + 1, 11)), axis=0).astype(np.float32)
        obs.append(seq[:-1])
        nxt.append(seq[1:])
        t = np.arange(steps)[:, None]
        a = np.tanh(1.5 * np.sin(0.15 * t + rng.uniform(0, 6, size=(1, 3)))) if smooth else rng.uniform(-1, 1, size=(steps, 3))
        act.append(a.astype(np.float32))
        rew.append(np.full(steps, s / steps, np.float32))
        e = np.zeros(steps, bool)
        e[-1] = True
        tout.append(e)
    n = len(scores) * steps
    return Dataset.from_arrays(np.concatenate(obs), np.concatenate(act), np.concatenate(rew), np.zeros(n, bool),
                               np.concatenate(tout), np.concatenate(nxt),
                               metadata={"env_id": "Hopper-v5", "action_low": [-1.0] * 3, "action_high": [1.0] * 3})


@pytest.fixture(scope="module")
def scripted():
    """Every tier from scripted Pendulum policies, two seeds each (about 10 s to roll)."""
    return {(tier, seed): pendulum_tier(tier, seed=seed) for tier in KIND_OF for seed in (0, 1)}


# ---------------------------------------------------------------------- the estimate
@pytest.mark.parametrize("name", sorted(BUNDLED))
def test_every_bundled_tier_is_classified_by_kind_and_tier(name):
    declared = BUNDLED[name]
    report = inspect_dataset(offrl_data.load(name))
    tier = report["tier"]
    assert tier["kind"] == KIND_OF[declared], tier["reasons"]
    assert tier["estimate"] == declared and tier["declared"] == declared and tier["agrees_with_metadata"]
    assert not any("metadata says" in w for w in report["warnings"])
    supporting = [e for e in tier["evidence"] if e["points_to"] == tier["kind"]]
    assert tier["confidence"] != "high" or len(supporting) >= 2   # never high from one signal
    refs = report["reference_returns"]
    assert refs["source"] and any(refs["source"][:25] in r for r in tier["reasons"])


def test_a_short_learning_history_with_one_signal_is_not_high_confidence():
    tier = inspect_dataset(offrl_data.load("pendulum-medium-replay-v0"))["tier"]
    assert tier["kind"] == "learning history" and tier["confidence"] == "low"
    assert any("only one signal supports the kind" in r and "only 15 episodes" in r for r in tier["reasons"])


@pytest.mark.parametrize("tier_name", sorted(KIND_OF))
def test_scripted_policies_of_every_tier_are_classified(scripted, tier_name):
    for seed in (0, 1):
        report = inspect_dataset(scripted[tier_name, seed])
        tier = report["tier"]
        assert tier["kind"] == KIND_OF[tier_name], (seed, tier["reasons"])
        assert tier["estimate"] == tier_name, (seed, tier["reasons"])


@pytest.mark.parametrize("tier_name", sorted(KIND_OF))
def test_the_kind_needs_no_reference_returns(scripted, tier_name):
    ds = scripted[tier_name, 0]
    bare = ds.replace(metadata={k: v for k, v in ds.metadata.items() if k not in ("ref_min_score", "ref_max_score", "env_id", "tier")})
    report = inspect_dataset(bare)
    tier = report["tier"]
    assert report["reference_returns"] is None and tier["level"] is None
    assert tier["kind"] == KIND_OF[tier_name], tier["reasons"]
    assert any(r.startswith("level: unknown") for r in tier["reasons"])
    if KIND_OF[tier_name] == "one policy":
        assert tier["estimate"] is None   # medium or expert is a question of level


def test_weak_references_change_the_level_not_the_kind(scripted):
    """The issue's failure: references from a much stronger expert put every episode near 0."""
    ds = scripted["medium-replay", 0]
    strong = ds.replace(metadata={**ds.metadata, "ref_min_score": -1300.0, "ref_max_score": 20_000.0})
    tier = inspect_dataset(strong)["tier"]
    assert tier["level"]["median_score"] < 15
    assert tier["kind"] == "learning history" and tier["estimate"] == "medium-replay"
    mixture = scripted["medium-expert", 0]
    tier = inspect_dataset(mixture.replace(metadata={**mixture.metadata, "ref_max_score": 20_000.0}))["tier"]
    assert tier["kind"] == "mixture of policies"


@pytest.mark.parametrize("true_tier,label", [("random", "expert"), ("expert", "medium-replay"),
                                             ("medium-replay", "medium"), ("medium-expert", "random"),
                                             ("medium", "expert")])
def test_mislabelled_files_keep_the_estimate_and_lower_the_confidence(scripted, true_tier, label):
    ds = scripted[true_tier, 0]
    honest = inspect_dataset(ds)["tier"]
    report = inspect_dataset(ds.replace(metadata={**ds.metadata, "tier": label}))
    tier = report["tier"]
    assert tier["kind"] == honest["kind"] and tier["estimate"] == honest["estimate"] == true_tier
    assert tier["declared"] == label and tier["agrees_with_metadata"] is False
    order = ["low", "medium", "high"]
    assert order.index(tier["confidence"]) == max(0, order.index(honest["confidence"]) - 1)
    assert any(f"metadata says tier '{label}'" in r for r in tier["reasons"])
    assert any(f"metadata says tier '{label}'" in w for w in report["warnings"])


def test_every_declared_tier_has_kinds():
    assert set(KINDS_OF_TIER) >= set(KIND_OF)
    for tier, kind in KIND_OF.items():
        assert kind in KINDS_OF_TIER[tier]


def test_a_shuffled_mixture_reads_as_one_policy_with_a_caveat():
    ds = pendulum_tier("medium-expert", seed=0, shuffle=True)
    tier = inspect_dataset(ds)["tier"]
    assert tier["kind"] == "one policy" and tier["confidence"] != "high"
    assert any("shuffled mixture" in e["reason"] for e in tier["evidence"])


# ---------------------------------------------------------------------- recommendation
def test_recommendation_follows_kind_and_level_and_cites_both(scripted):
    expected = {"random": "CQL", "medium": "IQL", "expert": "BC", "medium-expert": "IQL", "medium-replay": "IQL"}
    for tier_name, algo in expected.items():
        report = inspect_dataset(scripted[tier_name, 0])
        rec = report["recommendation"]
        assert rec["algorithm"] == algo, (tier_name, rec)
        assert "median normalized score" in rec["reasons"][0]


def test_expert_advice_names_bc_and_td3bc_and_random_advice_is_conservative():
    expert = recommend({"estimate": "expert", "kind": "one policy", "confidence": "high",
                        "level": {"median_score": 95.0}})
    assert expert["algorithm"] == "BC" and expert["alternatives"] == ["TD3+BC"]
    wide = recommend({"estimate": "expert", "kind": "one policy", "confidence": "high", "score_spread": 40.0,
                      "level": {"median_score": 95.0}})
    assert wide["algorithm"] == "TD3+BC" and "40 points" in wide["reasons"][0]
    random = recommend({"estimate": "random", "kind": "random actions", "confidence": "high"}, {"occupied_fraction": 0.1})
    assert random["algorithm"] == "CQL" and any("conservative" in r for r in random["reasons"])
    assert any("10% of the PCA grid" in r for r in random["reasons"])
    unsure = recommend({"estimate": None, "kind": "one policy", "confidence": "low", "level": None})
    assert unsure["algorithm"] == "IQL" and any("most robust default" in r for r in unsure["reasons"])


def test_env_argument_supplies_references(scripted):
    ds = scripted["expert", 0]
    bare = ds.replace(metadata={k: v for k, v in ds.metadata.items() if k not in ("ref_min_score", "ref_max_score", "env_id")})
    report = inspect_dataset(bare, env_id="Pendulum-v1")
    assert report["reference_returns"]["source"].startswith("offrl's measured reference returns for Pendulum-v1")
    assert report["tier"]["estimate"] == "expert"


# ---------------------------------------------------------------------- statistics
def test_spearman_and_order_fit_hand_computed():
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert np.isnan(spearman([1, 1, 1], [1, 2, 3]))
    # ranks 0..9 in order: a line explains all; the best step (after 5) explains
    # S_5^2 / 5 * 2 / sum (i - 4.5)^2 = 2 * 12.5^2 / 5 / 82.5 = 62.5 / 82.5.
    gradual = return_order_fit(np.arange(10.0))
    assert gradual["linear"] == pytest.approx(1.0) and gradual["step"] == pytest.approx(62.5 / 82.5) and gradual["step_at"] == 5
    # two shuffled blocks: the same step, but a line explains less (Spearman 113/165 = 0.6848, squared 0.4690).
    blocks = return_order_fit(np.array([3, 1, 4, 0, 2, 8, 6, 9, 5, 7], float))
    assert blocks["step"] == pytest.approx(62.5 / 82.5) and blocks["linear"] == pytest.approx((113 / 165) ** 2)
    assert np.isnan(return_order_fit(np.arange(5.0))["linear"])


def test_action_predictability_separates_policies_from_uniform_actions():
    policy = action_predictability(pendulum_tier("expert", episodes=12, seed=3))
    noise = action_predictability(rollout([uniform] * 12, seed=3))
    assert policy["r2"] > 0.4 and abs(noise["r2"]) < 0.15
    assert len(policy["episode_r2"]) == 12 and policy["episode_index"] == list(range(12))


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


def test_render_and_report_files(tmp_path, scripted):
    report = inspect_dataset(scripted["medium-expert", 0])
    from rich.console import Console

    console = Console(record=True, width=120)
    render(report, console)
    text = console.export_text()
    assert "estimated tier: medium-expert (mixture of policies)" in text and "recommendation: IQL" in text
    assert "metadata says 'medium-expert'" in text and "kind: mixture of policies" in text
    files = write_report(report, tmp_path / "rep")
    for key in ("returns", "actions", "states"):
        assert open(files[key], "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    summary = open(files["summary"]).read()
    assert "## Quality tier: medium-expert" in summary and "## Recommendation: IQL" in summary
    assert json.load(open(files["json"]))["tier"]["estimate"] == "medium-expert"


def test_sparkline():
    assert sparkline([0, 1, 2, 4]) == " ▂▄█"


# ---------------------------------------------------------------------- discrete actions
def test_discrete_data_gets_only_discrete_recommendations():
    from offrl.algos import algorithm_spec, get_algorithm
    from offrl.data import load

    report = inspect_dataset(load("cartpole-medium-expert-v0"))
    rec = report["recommendation"]
    assert report["action_histogram"]["num_actions"] == 2
    for name in [rec["algorithm"], *rec["alternatives"]]:
        assert name.startswith("discrete_"), rec
        assert algorithm_spec(get_algorithm(name)).action_space == "discrete"
    # CartPole's reward is always 1, but episodes that end in a terminal carry the signal: no "use BC" warning
    assert not any("every reward is the same" in w for w in report["warnings"])


def test_every_discrete_recommendation_names_the_discrete_family():
    continuous = {"CQL", "IQL", "TD3+BC", "BC"}
    cases = [({"estimate": "random", "kind": "random actions", "confidence": "high"}, "discrete_cql"),
             ({"estimate": "expert", "kind": "one policy", "confidence": "high", "level": {"median_score": 95.0}}, "discrete_bc"),
             ({"estimate": "expert", "kind": "one policy", "confidence": "high", "score_spread": 40.0,
               "level": {"median_score": 95.0}}, "discrete_bcq"),
             ({"estimate": "medium-replay", "kind": "learning history", "confidence": "low", "level": None}, "discrete_iql")]
    for tier, expected in cases:
        rec = recommend(tier, discrete=True)
        assert rec["algorithm"] == expected
        assert not continuous & {rec["algorithm"], *rec["alternatives"]}
        assert not any(f" {c} " in f" {r} " or r.startswith(f"{c}'s") for r in rec["reasons"] for c in continuous), rec


# ---------------------------------------------------------------------- behaviour shift
def two_policy_file(same: bool, episodes: int = 40, steps: int = 50, seed: int = 0):
    """Episodes of i.i.d. Gaussian states; actions tanh(W s) with one W for the first half of the
    file and, unless ``same``, another for the second half. Equal rewards everywhere."""
    rng = np.random.default_rng(seed)
    w1, w2 = rng.normal(size=(2, 4, 2))
    obs = rng.normal(size=(episodes * steps, 4))
    first = np.repeat(np.arange(episodes), steps) < episodes // 2
    act = np.where(first[:, None], np.tanh(obs @ w1), np.tanh(obs @ (w1 if same else w2)))
    tout = np.zeros(episodes * steps, bool)
    tout[steps - 1::steps] = True
    n = episodes * steps
    return Dataset.from_arrays(obs, act, np.ones(n), np.zeros(n, bool), tout, obs)


def test_behavior_shift_separates_one_policy_from_two_written_one_after_another():
    one, two = behavior_shift(two_policy_file(same=True)), behavior_shift(two_policy_file(same=False))
    assert abs(one["shift"]) < 0.03 and one["within"] > 0.6          # exchangeable halves
    assert two["shift"] > 0.5 and two["cross"] < 0.3 < two["within"]  # the halves disagree
    assert np.isclose(two["shift"], two["within"] - two["cross"])
    assert np.isnan(behavior_shift(two_policy_file(same=False, episodes=3))["shift"])   # too few episodes


def test_a_behavior_shift_alone_makes_a_mixture_and_one_policy_without_it():
    flat = {"linear": 0.0, "step": 0.01, "step_p": 0.5}
    steady = {"r2": 0.6, "trend": 0.0, "within": 0.6, "cross": 0.59, "shift": 0.01}
    kind = kind_of_data(steady, 0.0, flat, {"bimodal": False}, 0.6)
    assert kind["estimate"] == "one policy" and not any(e["signal"] == "behaviour shift" for e in kind["evidence"])
    shifted = {**steady, "cross": 0.3, "shift": 0.3}
    kind = kind_of_data(shifted, 0.0, flat, {"bimodal": False}, 0.6)
    assert kind["estimate"] == "mixture of policies"
    assert [e["signal"] for e in kind["support"]] == ["behaviour shift"]
    assert "R^2 0.30 across the halves, 0.60 within them" in kind["support"][0]["reason"]
    assert not any(e["signal"] == "no trend" for e in kind["evidence"])
    ds = two_policy_file(same=False)
    report = inspect_dataset(ds)     # per-episode R^2 also trends here, so the kind may read as a learner's
    assert report["tier"]["kind"] in ("mixture of policies", "learning history")
    assert report["action_predictability"]["shift"] > 0.5
    assert any(e["signal"] == "behaviour shift" for e in report["tier"]["evidence"])


def test_newer_algorithms_are_suggested_where_they_fit_with_the_reason():
    from offrl.algos import get_algorithm

    medium = recommend({"estimate": "medium", "kind": "one policy", "confidence": "high", "level": {"median_score": 45.0}})
    assert medium["algorithm"] == "IQL" and "ReBRAC" in medium["alternatives"]
    assert any("89.7 vs 81.6" in r for r in medium["reasons"])
    assert "EDAC" not in medium["alternatives"]  # one policy: narrow actions, no ensemble suggestion
    history = recommend({"estimate": "medium-replay", "kind": "learning history", "confidence": "high",
                         "level": {"median_score": 30.0}}, {"occupied_fraction": 0.55})
    assert {"ReBRAC", "EDAC"} <= set(history["alternatives"])
    assert any("55% of the PCA grid" in r and "N critics" in r for r in history["reasons"])
    narrow = recommend({"estimate": "random", "kind": "random actions", "confidence": "high"}, {"occupied_fraction": 0.1})
    assert "EDAC" not in narrow["alternatives"] and "ReBRAC" not in narrow["alternatives"]
    expert = recommend({"estimate": "expert", "kind": "one policy", "confidence": "high", "level": {"median_score": 95.0}})
    assert expert["alternatives"] == ["TD3+BC"]
    for name in [*history["alternatives"], history["algorithm"]]:
        get_algorithm(name)  # every name given is a registered algorithm
