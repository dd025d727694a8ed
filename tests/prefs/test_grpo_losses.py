"""GRPO's loss family (grpo, dapo, dr_grpo, bnpo, gspo), DAPO's parts and REINFORCE++: against
hand-computed numbers, against TRL's GRPOTrainer loss on the same batch (when trl is installed),
and short runs of the trainer."""

import math
import statistics
from collections import defaultdict
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

from offrl.prefs import rl_losses as R  # noqa: E402
from offrl.prefs.grpo import group_policy_gradient_loss  # noqa: E402


def t(*rows):
    return torch.tensor(rows, dtype=torch.float64)


def test_importance_ratio_token_and_sequence():
    logps, old = t([-1.0, -2.0, -3.0]), t([-1.5, -2.0, -9.0])
    mask = torch.tensor([[1, 1, 0]])
    assert R.importance_ratio(logps, old, mask, "token")[0, :2].tolist() == pytest.approx([math.exp(0.5), 1.0])
    # GSPO: exp of the mean token log-ratio over real tokens only: exp((0.5 + 0) / 2)
    seq = R.importance_ratio(logps, old, mask, "sequence")
    assert seq.shape == (1, 1) and seq.item() == pytest.approx(math.exp(0.25))
    with pytest.raises(ValueError):
        R.importance_ratio(logps, old, mask, "word")


def test_asymmetric_clip_hand_computed():
    ratio = t([0.5, 1.1, 1.5])
    # A > 0: min(rho, clip(rho, 0.8, 1.28)) -> 0.5, 1.1, 1.28 (only the top is clipped)
    assert R.asymmetric_clipped_objective(ratio, t([1.0]), 0.2, 0.28)[0].tolist() == pytest.approx([-0.5, -1.1, -1.28])
    # A < 0: min(-rho, -clip(rho)) -> -0.8 (the bottom is clipped), -1.1, -1.5
    assert R.asymmetric_clipped_objective(ratio, t([-1.0]), 0.2, 0.28)[0].tolist() == pytest.approx([0.8, 1.1, 1.5])
    # clip_high None is PPO's symmetric clip: the top clipped at 1.2
    assert R.asymmetric_clipped_objective(ratio, t([1.0]), 0.2)[0].tolist() == pytest.approx([-0.5, -1.1, -1.2])
    # equal to the existing symmetric clipped surrogate on one token
    mask = torch.ones(1, 3)
    ours = R.asymmetric_clipped_objective(ratio, t([2.0]), 0.2).mean()
    theirs, _ = R.clipped_surrogate_loss(ratio.log(), torch.zeros(1, 3, dtype=torch.float64), t([2.0, 2.0, 2.0]), mask)
    assert ours.item() == pytest.approx(theirs.item())


def test_aggregations_hand_computed():
    per_token = t([1.0, 2.0, 3.0], [4.0, 7.0, 7.0])  # the 7s sit in padding
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]])
    assert R.aggregate_token_loss(per_token, mask, "grpo").item() == pytest.approx((2.0 + 4.0) / 2)
    assert R.aggregate_token_loss(per_token, mask, "gspo").item() == pytest.approx(3.0)
    assert R.aggregate_token_loss(per_token, mask, "bnpo").item() == pytest.approx(10.0 / 4)
    assert R.aggregate_token_loss(per_token, mask, "dapo").item() == pytest.approx(10.0 / 4)
    assert R.aggregate_token_loss(per_token, mask, "dapo", num_tokens=8.0).item() == pytest.approx(10.0 / 8)
    assert R.aggregate_token_loss(per_token, mask, "dr_grpo", max_completion_length=5).item() == pytest.approx(1.0)
    with pytest.raises(ValueError):
        R.aggregate_token_loss(per_token, mask, "dr_grpo")
    with pytest.raises(ValueError):
        R.aggregate_token_loss(per_token, mask, "ppo")


def test_dynamic_sampling_and_overlong_penalty():
    keep = R.nonzero_variance_groups(t(1.0, 1.0, 0.0, 0.5, 2.0, 2.0, 2.0, 2.0), 4)
    assert keep.tolist() == [True] * 4 + [False] * 4
    # L_max = 10, L_cache = 4: free up to 6 tokens, then -1/4 per token, -1 past L_max
    pen = R.overlong_penalty(torch.tensor([5, 6, 7, 9, 10, 11]), max_length=10, buffer=4)
    assert pen.tolist() == pytest.approx([0.0, 0.0, -0.25, -0.75, -1.0, -1.0])


def test_reinforce_plus_plus_hand_computed():
    scores = torch.tensor([1.0, 0.0], dtype=torch.float64)
    kl = t([0.1, 0.2], [0.3, 0.5])
    mask = torch.tensor([[1, 1], [1, 0]])
    adv = R.reinforce_plus_plus_advantages(scores, kl, mask, kl_coef=0.5)
    # token rewards: row 0 [-0.05, -0.1 + 1], row 1 [-0.15]; returns-to-go [0.85, 0.9], [-0.15]
    g = [0.85, 0.9, -0.15]
    mean, std = statistics.mean(g), statistics.stdev(g)
    expected = [(x - mean) / math.sqrt(std ** 2 + 1e-8) for x in g]
    assert [adv[0, 0].item(), adv[0, 1].item(), adv[1, 0].item()] == pytest.approx(expected, rel=1e-9)
    assert adv[1, 1].item() == 0.0


def _batch(seed=0, B=6, T=5):
    g = torch.Generator().manual_seed(seed)
    logps = -torch.rand((B, T), generator=g, dtype=torch.float64) * 3
    old = logps + 0.4 * torch.randn((B, T), generator=g, dtype=torch.float64)  # ratios far from 1: clipping acts
    ref = logps + 0.3 * torch.randn((B, T), generator=g, dtype=torch.float64)
    adv = torch.randn(B, generator=g, dtype=torch.float64)
    lengths = torch.tensor([5, 3, 1, 4, 2, 5])
    mask = (torch.arange(T)[None] < lengths[:, None]).long()
    return logps, old, ref, adv, mask


def test_kl_term_and_gspo_by_hand():
    logps, old, ref, adv, mask = _batch()
    # with no KL, gspo's loss is the mean over sequences of the clipped sequence objective
    loss, _ = group_policy_gradient_loss(logps, old, ref, adv, mask, 0.2, 0.0, loss_type="gspo", clip_range_high=0.28)
    s = torch.exp(((logps - old) * mask).sum(-1) / mask.sum(-1))
    by_hand = -torch.minimum(s * adv, s.clamp(0.8, 1.28) * adv).mean()
    assert loss.item() == pytest.approx(by_hand.item(), rel=1e-12)
    # the KL term adds beta * (its aggregation): bnpo = token mean
    base, _ = group_policy_gradient_loss(logps, old, ref, adv, mask, 0.2, 0.0, loss_type="bnpo")
    with_kl, st = group_policy_gradient_loss(logps, old, ref, adv, mask, 0.2, 0.1, "k3", loss_type="bnpo")
    k3 = torch.expm1(ref - logps) - (ref - logps)
    assert (with_kl - base).item() == pytest.approx(0.1 * ((k3 * mask).sum() / mask.sum()).item(), rel=1e-9)


class _Recorder:
    """The part of GRPOTrainer's ``self`` that ``_compute_loss`` reads, with fixed per-token log-probs."""

    def __init__(self, logps, loss_type, level, beta, eps_low, eps_high, max_len):
        self._logps = logps
        self.loss_type, self.importance_sampling_level, self.beta = loss_type, level, beta
        self.epsilon_low, self.epsilon_high, self.max_completion_length = eps_low, eps_high, max_len
        self.top_entropy_quantile, self.off_policy_mask_threshold, self.use_vllm = 1.0, None, False
        self.args = SimpleNamespace(use_bias_correction_kl=False, delta=None, steps_per_generation=1)
        self.model = SimpleNamespace(training=True)
        self.current_gradient_accumulation_steps = 1
        self._entropy_bonus_enabled, self.aux_loss_enabled = False, False
        self._metrics = defaultdict(lambda: defaultdict(list))
        self.accelerator = SimpleNamespace(num_processes=1, gather=lambda x: x, gather_for_metrics=lambda x: x,
                                           reduce=lambda x, reduction="sum": x, sync_gradients=True)

    def _get_per_token_logps_and_entropies(self, model, *args, **kwargs):
        return self._logps, torch.zeros_like(self._logps), None


@pytest.mark.parametrize("loss_type", ["grpo", "dapo", "dr_grpo", "bnpo", "gspo"])
def test_group_losses_equal_trl_grpo_on_the_same_batch(loss_type):
    pytest.importorskip("trl")
    from trl import GRPOTrainer

    logps, old, ref, adv, mask = _batch(seed=3)
    beta, eps_low, eps_high, max_len = 0.04, 0.2, 0.28, 7
    num_tokens = mask.sum()
    ours, _ = group_policy_gradient_loss(logps, old, ref, adv, mask, eps_low, beta, "k3", loss_type, eps_high, max_len,
                                         num_tokens)
    fake = _Recorder(logps, "grpo" if loss_type == "gspo" else loss_type,
                     "sequence" if loss_type == "gspo" else "token", beta, eps_low, eps_high, max_len)
    B, T = logps.shape
    inputs = {"prompt_ids": torch.zeros((B, 1), dtype=torch.long), "prompt_mask": torch.ones((B, 1), dtype=torch.long),
              "completion_ids": torch.zeros((B, T), dtype=torch.long), "completion_mask": mask,
              "advantages": adv, "old_per_token_logps": old, "ref_per_token_logps": ref,
              "num_items_in_batch": num_tokens.to(torch.float64)}
    theirs = GRPOTrainer._compute_loss(fake, None, inputs)
    print(f"{loss_type}: offrl {ours.item():.12f} trl {theirs.item():.12f} diff {abs(ours.item() - theirs.item()):.1e}")
    assert abs(ours.item() - theirs.item()) < 1e-6


# --------------------------------------------------------------------------- trainer


def test_dapo_and_reinforce_plus_plus_runs(tiny_task, tiny_sft, tmp_path):
    from offrl.prefs import GRPOConfig, train_grpo

    common = dict(steps=2, batch_size=4, group_size=3, lr=1e-3, max_new_tokens=6, log_every=1)
    dapo = GRPOConfig(loss_type="dapo", clip_range_high=0.28, dynamic_sampling=True, overlong_buffer=3, kl_coef=0.0,
                      **common)
    result = train_grpo(tiny_sft, tiny_task["prompts_train"], str(tmp_path / "dapo"), dapo, progress=False)
    last = result.metrics[-1]
    assert 0 <= last["objective/kept_samples"] <= 12 and last["objective/kept_samples"] % 3 == 0
    assert last["objective/overlong_penalty"] <= 0.0
    rpp = GRPOConfig(estimator="reinforce++", loss_type="grpo", **common)
    result = train_grpo(tiny_sft, tiny_task["prompts_train"], str(tmp_path / "rpp"), rpp, progress=False)
    assert result.metrics[0]["policy/clipfrac"] == 0.0 and "loss/kl" not in result.metrics[0]  # KL in the reward
    assert result.metrics[1]["objective/kl"] != 0.0


def test_bad_overlong_buffer_is_one_sentence():
    from offrl.errors import ConfigError
    from offrl.prefs import GRPOConfig

    with pytest.raises(ConfigError, match="--overlong-buffer 9 is longer than --max-new-tokens 8"):
        GRPOConfig(max_new_tokens=8, overlong_buffer=9)
