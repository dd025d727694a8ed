"""The doctor on tiers that ``offrl collect`` builds from a short SAC zoo (the session fixture's
2,000 Pendulum steps): the kind of data is read from the data, not from the zoo's references."""

import pytest

from offrl.collect.tiers import build_tier_dataset
from offrl.data.doctor import inspect_dataset
from offrl.data.doctor.tier import KINDS_OF_TIER

# medium-expert: this zoo's medium and expert snapshots differ by less than one episode's spread of
# Pendulum returns, so 20 episodes cannot tell two blocks from a gradual rise: over seeds 0-7 the
# doctor said "mixture of policies" for 5 of 8 tiers collected by the jitted actor and 2 of 8 by the
# host-independent one (6 of 8 at 8000 rows). Here it must see that the behaviour changes along the
# file (either kind that says so); telling the two apart is tested on the MuJoCo tiers, whose
# policies differ clearly (tests/data/test_doctor_mujoco_tiers.py).
KIND_OF = {"random": ("random actions",), "medium": ("one policy",), "medium-expert": ("mixture of policies", "learning history"),
           "expert": ("one policy",)}


@pytest.mark.parametrize("tier", sorted(KIND_OF))
def test_collected_tiers_are_classified_by_kind(pendulum_zoo, tier):
    ds = build_tier_dataset(pendulum_zoo, tier, size=4000, seed=0, env_id="Pendulum-v1", num_envs=4)
    report = inspect_dataset(ds)
    assert report["tier"]["kind"] in KIND_OF[tier], report["tier"]["reasons"]
    assert report["reference_returns"]["source"].startswith("measured in the zoo")


def test_a_replay_too_short_for_trends_is_low_confidence(pendulum_zoo):
    """2,000 SAC steps hold 10 episodes at most: too few for a trend along the file, so the doctor
    cannot see the learning and says its estimate is weak. The halves' behaviour shift can still see
    that the policy changes: a mixture or a learning history, both kinds of medium-replay data."""
    ds = build_tier_dataset(pendulum_zoo, "medium-replay", size=4000, seed=0, env_id="Pendulum-v1", num_envs=4)
    tier = inspect_dataset(ds)["tier"]
    assert ds.num_episodes < 20 and tier["confidence"] == "low"
    assert tier["kind"] in KINDS_OF_TIER["medium-replay"], tier["reasons"]
