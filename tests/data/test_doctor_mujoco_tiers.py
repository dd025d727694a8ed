"""The doctor's kind and tier on every tier of every MuJoCo env the benchmark uses, from a fixture.

``fixtures/doctor_mujoco_tiers.json`` holds, per file (Hopper-v5, HalfCheetah-v5, Walker2d-v5 x
medium, medium-replay, medium-expert, expert, 100k transitions each, collected from offrl's SAC
zoos; and Hopper-v5 medium, medium-replay, medium-expert collected from Stable-Baselines3 SAC
policies by ``benchmarks/sb3_tiers.py``: data the rule was not tuned on; made by
``benchmarks/doctor_tiers.py``), every episode's return and the statistics of the actions the
kind rule consumes, computed on the whole file. The returns' own statistics (trend,
order fit, modes, level) are recomputed here, so the rule and those statistics are both tested.
"""

import json
from pathlib import Path

import numpy as np
import pytest

from offrl.data.doctor import bimodality, estimate_tier, kind_of_data, level_of_data, return_order_fit, return_trend
from offrl.data.doctor.render import tier_headline
from offrl.data.doctor.tier import CONFIDENCE

FIXTURE = json.loads((Path(__file__).parent / "fixtures" / "doctor_mujoco_tiers.json").read_text())
KIND_OF = {"medium": "one policy", "expert": "one policy", "medium-expert": "mixture of policies",
           "medium-replay": "learning history"}
#: a label of another kind, and a label of the same kind but another level, for each true tier.
WRONG_KIND = {"medium": "medium-replay", "expert": "medium-expert", "medium-replay": "medium", "medium-expert": "expert"}
WRONG_LEVEL = {"medium": "expert", "expert": "medium", "medium-replay": "full-replay", "medium-expert": None}


def classify(entry: dict, declared: str | None) -> dict:
    returns = np.asarray(entry["returns"], dtype=np.float64)
    refs = entry["references"]
    scores = 100.0 * (returns - refs["random"]) / (refs["expert"] - refs["random"])
    modes, order_fit = bimodality(scores), return_order_fit(returns)
    kind = kind_of_data(entry["predictability"], return_trend(returns), order_fit, modes,
                        entry["action_autocorrelation"], entry["action_entropy"])
    return estimate_tier(kind, level_of_data(scores, refs, modes, order_fit), entry["episodes"], declared)


def test_the_fixture_covers_every_tier_of_every_env():
    zoo = [e for e in FIXTURE.values() if e["collected_by"] == "offrl zoo"]
    pairs = {(e["env_id"], e["tier"]) for e in zoo}
    assert len(zoo) == len(pairs) == 12
    assert pairs == {(env, tier) for env in ("Hopper-v5", "HalfCheetah-v5", "Walker2d-v5") for tier in KIND_OF}
    # medium-replay holds the zoo's history up to the medium snapshot, at most 100k transitions
    assert all(e["transitions"] >= 99_000 or e["tier"] == "medium-replay" for e in zoo)
    sb3 = {e["tier"] for e in FIXTURE.values() if e["collected_by"] == "stable-baselines3 SAC"}
    assert sb3 == {"medium", "medium-replay", "medium-expert"}
    assert all(e["references"]["source"].startswith("D4RL") for e in FIXTURE.values())


@pytest.mark.parametrize("name", sorted(FIXTURE))
def test_every_tier_of_every_env_is_classified_by_kind(name):
    entry = FIXTURE[name]
    tier = classify(entry, entry["tier"])
    assert tier["kind"] == KIND_OF[entry["tier"]], tier["reasons"]
    assert tier["kind"] == entry["doctor"]["kind"]        # the same verdict as offrl inspect on the whole file
    assert tier["confidence"] != "high" or len([e for e in tier["evidence"] if e["points_to"] == tier["kind"]]) >= 2


@pytest.mark.parametrize("name", sorted(FIXTURE))
def test_a_label_of_another_kind_keeps_the_estimate_lowers_the_confidence_and_shows_both(name):
    entry = FIXTURE[name]
    unlabelled, right = classify(entry, None), classify(entry, entry["tier"])
    wrong_label = WRONG_KIND[entry["tier"]]
    wrong = classify(entry, wrong_label)
    assert wrong["kind"] == right["kind"] == unlabelled["kind"] and wrong["estimate"] == right["estimate"]
    assert wrong["declared"] == wrong_label and wrong["agrees_with_metadata"] is False
    assert CONFIDENCE.index(wrong["confidence"]) == max(0, CONFIDENCE.index(unlabelled["confidence"]) - 1)
    if right["agrees_with_metadata"]:
        assert right["confidence"] == unlabelled["confidence"]
    assert any(f"the metadata says tier '{wrong_label}'" in r for r in wrong["reasons"])
    headline = tier_headline(wrong)
    assert f"({right['kind']})" in headline and f"metadata says '{wrong_label}' (disagrees)" in headline


@pytest.mark.parametrize("name", sorted(n for n in FIXTURE if WRONG_LEVEL[FIXTURE[n]["tier"]]))
def test_a_label_of_the_right_kind_but_another_level_is_flagged_too(name):
    entry = FIXTURE[name]
    unlabelled = classify(entry, None)
    wrong = classify(entry, WRONG_LEVEL[entry["tier"]])
    assert wrong["kind"] == unlabelled["kind"] and wrong["declared"] == WRONG_LEVEL[entry["tier"]]
    if unlabelled["estimate"] != WRONG_LEVEL[entry["tier"]]:
        assert wrong["agrees_with_metadata"] is False
        assert CONFIDENCE.index(wrong["confidence"]) == max(0, CONFIDENCE.index(unlabelled["confidence"]) - 1)
