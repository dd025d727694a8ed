"""FQE's divergence rule, the rollback of a diverged candidate, the FQE seed ensemble, and
``select`` leaving diverged candidates out.

The known-answer problem is the 1-D linear-Gaussian system of ``test_linear_gaussian.py``
(closed-form value of the smoothed target policy). The diverging candidate always plays action
5 where the data's actions lie in about [-2, 2.2]: FQE's backups then read the critic far outside
the data, and its estimate grows without bound (measured: past 1e4 within 1000 steps, positive
although every reward is <= 0).
"""

import json
import math

import jax
import numpy as np
import pytest
from test_linear_gaussian import KT, ST, forward_value, infinite_value, long_horizon_dataset

from offrl.cli import main
from offrl.data import save
from offrl.data.dataset import Dataset
from offrl.errors import OffrlError
from offrl.ope import estimators as est
from offrl.ope import fqe
from offrl.ope.estimators import OPEResult
from offrl.ope.evaluate import OPEConfig, OPEReport, evaluate_policies
from offrl.ope.fqe import FQEConfig
from offrl.ope.policies import GaussianPolicy
from offrl.ope.select import choose, excluded_message, near_tie
from offrl.policy import save_numpy_policy

GAMMA, HORIZON = 0.8, 30


# ---------------------------------------------------------------------- the rule by hand
def test_divergence_by_estimate_by_hand():
    # bounds [0, 100], margin 0.1: the slack is 10, so estimates in [-10, 110] pass; window 1: the last chunk decides
    est_rows = np.array([[[50.0, 50.0], [109.9, 50.0], [50.0, -10.5], [np.nan, 50.0], [110.1, 110.1]]])   # (T=1, P=5, S=2)
    losses = np.ones((1, 5, 2))
    by_estimate, by_loss, inside = fqe.diverged(est_rows, losses, 1, (0.0, 100.0), margin=0.1, loss_growth=4.0)
    assert by_estimate.tolist() == [False, False, True, True, True]         # any seed out (or NaN) counts
    assert inside.tolist() == [True, True, False, False, False]
    assert by_loss.tolist() == [False] * 5                                   # too few chunks to judge a loss
    # window 2: out of the range in both of the last 2 chunks, not once (a critic far from its fit swings)
    rows = np.array([[200.0, 50.0, 200.0, 50.0],
                     [200.0, 200.0, 50.0, 50.0]])[..., None]                 # (T=2, P=4, S=1)
    by_estimate, _, inside = fqe.diverged(rows, np.ones((2, 4)), 2, (0.0, 100.0), 0.1, None)
    assert by_estimate.tolist() == [True, False, False, False] and inside.tolist() == [False, False, True, True]
    assert not fqe.diverged(rows[:1], np.ones((1, 4)), 2, (0.0, 100.0), 0.1, None)[0].any()     # one chunk: not yet
    # no bounds: the estimate test is off; one seed of one policy (T, P) works too
    assert not fqe.diverged(np.array([[1e9]]), np.ones((1, 1)), 1, None)[0].any()
    # the width's floor: bounds [0, 0] (all rewards 0) with return scale 1 leave a slack of 0.1
    assert fqe.diverged(np.array([[0.05, 0.2]]), np.ones((1, 2)), 1, (0.0, 0.0), 0.1, None, scale=1.0)[0].tolist() == [False, True]


def test_divergence_by_loss_by_hand():
    w, growth = 2, 4.0
    est_rows = np.zeros((4, 4))
    # window means over chunks (i, i+1); the last window against the lowest window that ends before it starts
    losses = np.array([[1.0, 1.0, 1.0, 1.0],        # means 1, 1, 1:     1 vs 1, no
                       [1.0, 1.0, 3.0, 5.0],        # means 1, 2, 4:     4 is not > 4 * 1, no
                       [1.0, 1.0, 4.0, 5.0],        # means 1, 2.5, 4.5: 4.5 > 4, yes
                       [1.0, 1.0, 1.0, np.inf]]).T  # a non-finite loss: yes
    by_estimate, by_loss, inside = fqe.diverged(est_rows, losses, w, (-1.0, 1.0), 0.1, growth)
    assert by_loss.tolist() == [False, False, True, True] and not by_estimate.any()
    assert inside.tolist() == [True, True, False, False]                     # a failed loss test is no chunk to return to
    # the reference is the lowest earlier window, not the one just before: 4,1,1,2,3 has windows 2.5, 1, 1.5, 2.5
    series = np.array([4.0, 1.0, 1.0, 2.0, 3.0])[:, None]
    assert fqe.diverged(np.zeros((5, 1)), series, w, None, loss_growth=2.0)[1].tolist() == [True]      # 2.5 > 2 * 1
    assert fqe.diverged(np.zeros((5, 1)), series, w, None, loss_growth=2.6)[1].tolist() == [False]
    assert fqe.diverged(np.zeros((5, 1)), series, w, None, loss_growth=None)[1].tolist() == [False]    # the test is off


def test_seed_half_width_and_combined_interval_by_hand():
    # sd(1, 2, 3) = 1, t_{2, 0.975} = 4.302653: h = 4.302653 / sqrt(3)
    assert est.seed_half_width([1.0, 2.0, 3.0], 0.95) == pytest.approx(4.302653 / math.sqrt(3), rel=1e-6)
    assert est.seed_half_width([7.0], 0.95) == 0.0
    assert est.combined_interval(10.0, 7.0, 14.0, 0.0) == (7.0, 14.0)                        # one seed: the data's interval
    low, high = est.combined_interval(10.0, 7.0, 14.0, 4.0)
    assert low == pytest.approx(10.0 - 5.0) and high == pytest.approx(10.0 + math.sqrt(32.0))   # 3-4-5 and 4-4


def test_judge_chunk_applies_the_stopping_rule_to_the_candidates_still_active():
    # policy 0 flat at 100; policy 1 climbing 10% a chunk (inside the bounds [0, 1000])
    est_rows = np.array([[100.0, 100.0, 100.0, 100.0], [50.0, 55.0, 60.5, 66.6]]).T[..., None]     # (T=4, P=2, S=1)
    loss_rows = np.ones((4, 2, 1))
    args = (2, 0.01, 0.1, 1e-3, (0.0, 1000.0), 0.1, 4.0, 1.0)
    failed, by_estimate, inside, flat = fqe.judge_chunk(est_rows, loss_rows, np.array([True, True]), *args)
    assert not failed.any() and inside.all() and not flat                  # policy 1 still moves
    frozen = est_rows.copy()
    frozen[:, 1] = np.nan                                                   # policy 1 frozen earlier: its rows are NaN
    failed, _, _, flat = fqe.judge_chunk(frozen, np.where(np.isnan(frozen), np.nan, loss_rows), np.array([True, False]), *args)
    assert not failed.any() and flat                                        # it no longer blocks policy 0
    # policy 1 out of the bounds for the whole window now: it fails and the rest is judged without it
    out = est_rows.copy()
    out[-2:, 1] = 5000.0
    failed, by_estimate, inside, flat = fqe.judge_chunk(out, loss_rows, np.array([True, True]), *args)
    assert failed.tolist() == [False, True] and by_estimate.tolist() == [False, True] and inside.tolist() == [True, False] and flat


# ---------------------------------------------------------------------- rollback in train_until_flat
def one_step_problem(n=1024):
    """Terminal after every step with reward ``a_0``: ``V(s)`` at the action 0 is 0."""
    rng = np.random.default_rng(0)
    obs = rng.normal(size=(n, 3)).astype(np.float32)
    act = rng.uniform(-1, 1, size=(n, 2)).astype(np.float32)
    return Dataset.from_arrays(obs, act, act[:, 0], np.ones(n, bool), next_observations=obs), obs


def test_a_diverged_candidate_is_rolled_back_to_its_last_passing_chunk_and_frees_the_others():
    ds, obs = one_step_problem()
    data = fqe.fqe_data(ds, np.zeros((2, len(obs), 2), np.float32))
    config = FQEConfig(hidden_dims=(16, 16), learning_rate=1e-3)
    chunk = 200
    zeros = np.zeros((2, 64, 2), np.float32)

    def probe(agents):
        # candidate 1's estimate is made to jump out of the bounds [-1, 1] from its 3rd chunk on: with a
        # window of 2 chunks it has diverged at the 4th and returns to the 2nd, its last chunk inside
        values = fqe.state_values(agents, data, obs[:64], zeros).mean(-1)           # (P, S)
        return values + np.array([[0.0], [1e6 if int(agents.step[1, 0]) >= 3 * chunk else 0.0]])

    agents, metrics, curve = fqe.train_until_flat(fqe.create(config, data), data, probe, max_steps=20 * chunk, window=2,
                                                  tolerance=0.05, loss_tolerance=0.5, chunk=chunk, bounds=(-1.0, 1.0))
    assert curve.diverged() == [1] and curve.reasons[1] == "estimate"
    assert curve.diverged_at.tolist() == [0, 4 * chunk] and curve.frozen_at.tolist() == [0, 2 * chunk]
    assert curve.converged and curve.steps[-1] < 20 * chunk                          # candidate 0 flattened alone
    assert curve.estimates[3, 1] > 1e5 and np.isnan(curve.estimates[4:, 1]).all() and np.isfinite(curve.estimates[:, 0]).all()
    assert np.isnan(metrics["fqe/loss"][1]).all() and np.isfinite(metrics["fqe/loss"][0]).all()
    # candidate 1 holds exactly the parameters it had after 2 chunks (the run is deterministic)
    reference, _ = fqe.train(fqe.create(config, data), data, num_steps=2 * chunk, chunk=chunk)
    assert int(agents.step[1, 0]) == 2 * chunk
    for got, want in zip(jax.tree_util.tree_leaves(agents.critic.params), jax.tree_util.tree_leaves(reference.critic.params)):
        np.testing.assert_array_equal(np.asarray(got)[1], np.asarray(want)[1])
    # without the bound the same probe keeps it in: it ends on the cap or flat, never diverged
    _, _, unguarded = fqe.train_until_flat(fqe.create(config, data), data, probe, max_steps=8 * chunk, window=2,
                                           tolerance=0.05, loss_tolerance=0.5, chunk=chunk, bounds=None, loss_growth=None)
    assert unguarded.diverged() == []
    d = curve.to_dict()
    assert d["diverged_at"] == [0, 4 * chunk] and d["estimates"][-1][1] is None
    json.dumps(d, allow_nan=False)                                                   # strict JSON: NaN written as null


# ---------------------------------------------------------------------- known answer, end to end
def linear_gaussian_dataset():
    return long_horizon_dataset(HORIZON, 200, seed=2)


BOX = (np.array([-10.0]), np.array([10.0]))
TARGET = GaussianPolicy(lambda obs: KT * obs[:, :1], *BOX, std=0.04, name="target")     # sigma 0.4 = ST in env units
FAR = GaussianPolicy(lambda obs: np.full((len(obs), 1), 5.0), *BOX, std=0.04, name="far")


def run(seeds=1, **overrides):
    config = OPEConfig(estimators=("fqe", "dr"), discount=GAMMA, fqe_steps=10_000, fqe_window=2000, num_bootstrap=200,
                       fqe_seeds=seeds, fqe=FQEConfig(hidden_dims=(64, 64)), **overrides)
    return evaluate_policies([TARGET, FAR], linear_gaussian_dataset(), config)


@pytest.fixture(scope="module")
def guarded():
    return run()


def test_a_candidate_acting_far_from_the_data_diverges_and_the_other_still_flattens(guarded):
    report = guarded
    assert np.abs(linear_gaussian_dataset().actions).max() < 2.5
    d = report.diverged()
    # out of the range from the first chunk on: diverged once a whole window (2 chunks) has been out
    assert list(d) == ["far"] and d["far"]["step"] == 2000 and d["far"]["frozen_at"] == 0 and d["far"]["reason"] == "estimate"
    assert report.fqe["converged"] and report.fqe["final_step"] < 10_000
    truth = infinite_value(KT, ST, GAMMA)                       # FQE's V(s_0) (it bootstraps at the timeouts)
    assert abs(report.results["target"]["fqe"].estimate - truth) < 0.05 * abs(truth), report.results["target"]["fqe"]
    truth_horizon = forward_value(KT, ST, HORIZON, GAMMA)       # DR's 30-step value
    assert abs(report.results["target"]["dr"].estimate - truth_horizon) < 0.05 * abs(truth_horizon)
    # the frozen candidate's rows are finite (its critic at initialisation), and flagged, not dropped
    assert np.isfinite(report.results["far"]["fqe"].estimate)
    assert report.fqe["seeds"] == 1 and report.fqe["ensemble"] == {}           # one seed: the bootstrap interval alone


def test_without_the_guard_the_diverging_candidate_keeps_everyone_from_flattening():
    # margins so wide that nothing counts as diverged: the run goes to the cap, the estimate far outside the bounds
    report = run(fqe_divergence_margin=1e9, fqe_loss_growth=1e9)
    assert report.diverged() == {} and not report.fqe["converged"] and report.fqe["final_step"] == 10_000
    low, high = report.fqe["value_bounds"]
    assert report.results["far"]["fqe"].estimate < low - 10 * (high - low) and report.fqe["outside_value_bounds"] == ["far"]


def test_select_never_chooses_the_diverged_candidate(guarded):
    report = guarded
    # the frozen critic's estimate (near 0) is above the target's (-3.4): a plain argmax would pick it
    assert report.results["far"]["fqe"].estimate > report.results["target"]["fqe"].estimate
    assert choose(report, "fqe") == "target" and choose(report, "dr") == "target"
    line = excluded_message(report, "fqe")
    assert line.count("\n") == 0 and "far (FQE diverged at step 2000" in line and "frozen at step 0" in line
    assert near_tie(report, "fqe") is None                      # the diverged candidate is no runner-up either


def hand_report(estimates: dict, diverged: dict) -> OPEReport:
    row = lambda name, value: OPEResult(name, value, value - 1, value + 1, "bootstrap", 0.95, float("nan"), float("nan"),  # noqa: E731
                                        10, False, False)
    results = {p: {"fqe": row("fqe", v), "wis": row("wis", v)} for p, v in estimates.items()}
    return OPEReport(list(estimates), results, False, {p: "" for p in estimates}, {p: {} for p in estimates}, {},
                     {"diverged": diverged})


def test_select_rules_by_hand():
    info = {"step": 4000, "frozen_at": 3000, "reason": "loss", "estimate": 900.0}
    report = hand_report({"a": 10.0, "b": 900.0, "c": 9.5}, {"b": info})
    assert choose(report, "fqe") == "a"
    assert choose(report, "wis") == "b"                          # an importance-sampling estimate does not use Q
    assert excluded_message(report, "wis") is None
    assert near_tie(report, "fqe").startswith("near-tie: a")     # a against c, not b
    everything = hand_report({"a": 1.0}, {"a": info})
    with pytest.raises(OffrlError, match="FQE diverged for every candidate"):
        choose(everything, "fqe")


# ---------------------------------------------------------------------- the seed ensemble
def test_the_seed_ensembles_interval_covers_the_truth_and_combines_as_stated():
    report = run(seeds=3)
    truth = infinite_value(KT, ST, GAMMA)
    curve = report.fqe
    assert curve["seeds"] == 3 and np.asarray(curve["seed_estimates"], dtype=float).shape[1:] == (2, 3)   # one vmapped run
    record = curve["ensemble"]["target"]["fqe"]
    per_seed = np.array(record["per_seed"])
    assert len(set(per_seed.round(6))) == 3                      # three different initialisations, not copies
    result = report.results["target"]["fqe"]
    assert result.estimate == pytest.approx(per_seed.mean(), rel=1e-5)           # the mean, = DM with the mean Q
    half = 4.302653 * per_seed.std(ddof=1) / math.sqrt(3)
    assert record["seed_half_width"] == pytest.approx(half, rel=1e-5)
    data_low, data_high = record["data_ci"]
    assert result.ci_low == pytest.approx(result.estimate - math.hypot(result.estimate - data_low, half))
    assert result.ci_high == pytest.approx(result.estimate + math.hypot(data_high - result.estimate, half))
    assert result.ci_low <= truth <= result.ci_high, (result.ci, truth)
    assert abs(result.estimate - truth) < 0.05 * abs(truth)
    truth_horizon = forward_value(KT, ST, HORIZON, GAMMA)
    assert report.results["target"]["dr"].ci_low <= truth_horizon <= report.results["target"]["dr"].ci_high
    assert list(report.diverged()) == ["far"]                    # every seed of it frozen together


# ---------------------------------------------------------------------- CLI
def cli_setup(tmp_path):
    """The linear-Gaussian data on disk, a policy near the data and one that acts at ~10 (tanh(3) * 10)."""
    path = save(linear_gaussian_dataset(), tmp_path / "lg.hdf5")
    low, high = [-10.0], [10.0]
    near = save_numpy_policy(tmp_path / "near", [(np.array([[-0.05]]), np.zeros(1))], np.zeros(1), np.ones(1), low, high, {"step": 1})
    far = save_numpy_policy(tmp_path / "far", [(np.zeros((1, 1)), np.full(1, 3.0))], np.zeros(1), np.ones(1), low, high, {"step": 2})
    return str(path), [str(near), str(far)]


FAST = ["--fqe-steps", "3000", "--fqe-window", "1000", "--bootstrap", "20", "--discount", "0.8"]


def test_select_command_excludes_the_diverged_candidate_in_one_line(tmp_path, capsys):
    data, exports = cli_setup(tmp_path)
    out = tmp_path / "out"
    assert main(["select", *exports, "--dataset", data, "--by", "fqe", "--out", str(out), *FAST]) == 0
    printed = " ".join(capsys.readouterr().out.split())
    assert "excluded from the choice by fqe: far (FQE diverged at step 1000" in printed
    assert "selected: near" in printed and "FQE diverged for far at step 1000" in printed
    payload = json.loads((out / "ope.json").read_text())
    assert payload["selected"] == "near" and payload["fqe"]["diverged"]["far"]["step"] == 1000
    far_row = next(r for r in payload["rows"] if r["policy"] == "far")
    near_row = next(r for r in payload["rows"] if r["policy"] == "near")
    assert far_row["estimate"] > near_row["estimate"]           # it would have won the argmax


@pytest.mark.slow  # 50 s of CLI FQE fits; the interval's construction is tested in-process above
def test_ope_command_with_seeds_says_how_the_interval_is_made(tmp_path, capsys):
    data, exports = cli_setup(tmp_path)
    assert main(["ope", exports[0], "--dataset", data, "--estimators", "fqe", "--fqe-seeds", "2", *FAST]) == 0
    printed = " ".join(capsys.readouterr().out.split())
    assert "2 FQE seeds" in printed and "the mean over 2 FQE seeds" in printed and "in quadrature" in printed


@pytest.mark.parametrize("flag, value, expect", [
    ("--fqe-seeds", "0", "--fqe-seeds is 0; it must be an integer in [1, 32] (e.g. --fqe-seeds 1)."),
    ("--fqe-seeds", "33", "--fqe-seeds is 33; it must be an integer in [1, 32] (e.g. --fqe-seeds 1)."),
    ("--fqe-divergence-margin", "-0.5", "--fqe-divergence-margin is -0.5; it must be a number >= 0"),
    ("--fqe-loss-growth", "1", "--fqe-loss-growth is 1.0; it must be a number > 1"),
])
def test_bad_fqe_flags_are_one_line_and_exit_2(tmp_path, capsys, flag, value, expect):
    data, exports = cli_setup(tmp_path)
    assert main(["ope", *exports, "--dataset", data, flag, value]) == 2
    err = capsys.readouterr().err.strip()
    assert expect in err and len(err.splitlines()) == 1, err


def test_a_non_integer_seed_count_is_refused_by_the_parser(tmp_path, capsys):
    data, exports = cli_setup(tmp_path)
    with pytest.raises(SystemExit) as exc:
        main(["ope", *exports, "--dataset", data, "--fqe-seeds", "2.5"])
    assert exc.value.code == 2
    assert "argument --fqe-seeds: invalid int value: '2.5'" in capsys.readouterr().err.strip().splitlines()[-1]
