"""SimPO, CPO and ORPO: against hand-computed numbers, against TRL's implementation on the same batch
(when trl is installed), and in short runs of the trainer and the command."""

import math
import os
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

from offrl.prefs import losses as L  # noqa: E402

sp = lambda z: math.log1p(math.exp(-z))  # noqa: E731  -log sigma(z)


def t(*values):
    return torch.tensor(values, dtype=torch.float64)


def test_simpo_hand_computed():
    # z = beta (pi_w - pi_l) - gamma = 2 * (-0.5 - -1.5) - 0.5 = 1.5
    losses, r_c, r_r = L.simpo_loss(t(-0.5), t(-1.5), beta=2.0, gamma=0.5)
    assert losses.item() == pytest.approx(sp(1.5), abs=1e-12)
    assert (r_c.item(), r_r.item()) == pytest.approx((-1.0, -3.0))
    smoothed, _, _ = L.simpo_loss(t(-0.5), t(-1.5), beta=2.0, gamma=0.5, label_smoothing=0.2)
    assert smoothed.item() == pytest.approx(0.8 * sp(1.5) + 0.2 * sp(-1.5), abs=1e-12)
    # equal log-probs, no margin: log 2; the margin gamma is paid even then
    assert L.simpo_loss(t(-1.0), t(-1.0), beta=2.0, gamma=0.0)[0].item() == pytest.approx(math.log(2))
    assert L.simpo_loss(t(-1.0), t(-1.0), beta=2.0, gamma=1.0)[0].item() == pytest.approx(sp(-1.0))
    # d/d pi_w = -beta * sigma(-z)
    x = t(-0.5).requires_grad_()
    L.simpo_loss(x, t(-1.5), beta=2.0, gamma=0.5)[0].sum().backward()
    assert x.grad.item() == pytest.approx(-2.0 / (1 + math.exp(1.5)), rel=1e-12)


def test_cpo_hand_computed():
    # z = 0.1 * (-3 - -5) = 0.2; plus alpha * NLL
    losses, r_c, r_r = L.cpo_loss(t(-3.0), t(-5.0), t(0.7), beta=0.1, alpha=1.0)
    assert losses.item() == pytest.approx(sp(0.2) + 0.7, abs=1e-12)
    assert (r_c.item(), r_r.item()) == pytest.approx((-0.3, -0.5))
    losses, _, _ = L.cpo_loss(t(-3.0, -1.0), t(-5.0, -1.0), t(0.7), beta=0.1, alpha=0.5, label_smoothing=0.1)
    assert losses.tolist() == pytest.approx([0.9 * sp(0.2) + 0.1 * sp(-0.2) + 0.35, math.log(2) + 0.35], abs=1e-12)


def test_orpo_hand_computed():
    # P(y_w) = 0.5 -> odds 1; P(y_l) = 0.2 -> odds 1/4: log OR = log 4, log sigma(log 4) = log 0.8
    pi_c, pi_r = t(math.log(0.5)), t(math.log(0.2))
    assert L.log_odds_ratio(pi_c, pi_r).item() == pytest.approx(math.log(4.0), abs=1e-12)
    losses, r_c, r_r = L.orpo_loss(pi_c, pi_r, t(1.3), lam=0.1)
    assert losses.item() == pytest.approx(1.3 - 0.1 * math.log(0.8), abs=1e-12)
    assert r_c.item() == pytest.approx(0.1 * math.log(0.5))
    # equal probabilities: the odds-ratio term is lambda log 2
    assert L.orpo_loss(t(-2.0), t(-2.0), t(0.0), lam=0.5)[0].item() == pytest.approx(0.5 * math.log(2))


def test_log1mexp_is_accurate_at_both_ends():
    for x in (-1e-12, -1e-5, -0.5, -math.log(2), -1.0, -30.0, -700.0):
        expected = math.log(-math.expm1(x)) if x > -math.log(2) else math.log1p(-math.exp(x))
        assert L.log1mexp(t(x)).item() == pytest.approx(expected, rel=1e-12)
    assert L.log1mexp(t(-1e-12)).item() == pytest.approx(math.log(1e-12), rel=1e-9)  # naive log(1 - e^x) loses digits


# --------------------------------------------------------------------------- against TRL on the same batch


class _FixedLogits(torch.nn.Module):
    """A 'model' that returns fixed logits, so that both libraries read the same numbers."""

    def __init__(self, logits):
        super().__init__()
        self.logits = logits

    def forward(self, input_ids, attention_mask=None, use_cache=False, logits_to_keep=0):
        return SimpleNamespace(logits=self.logits[:, -logits_to_keep:] if logits_to_keep else self.logits)


def _same_batch():
    from offrl.prefs.modeling import collate_sequences

    g = torch.Generator().manual_seed(0)
    prompts = [[3, 4, 5], [6, 7]]
    chosen, rejected = [[8, 9, 10], [11, 12, 13, 14]], [[15, 16], [17, 18, 19, 20, 21]]
    batch = collate_sequences(prompts + prompts, chosen + rejected, pad_token_id=0)
    logits = torch.randn((*batch["input_ids"].shape, 24), generator=g, dtype=torch.float32) * 3
    labels = batch["input_ids"].masked_fill(batch["completion_mask"] == 0, -100)
    return batch, logits, labels


def _trl_side(logits, labels, average):
    from trl.experimental.cpo import CPOTrainer

    all_logps = CPOTrainer.get_batch_logps(logits, labels, average_log_prob=average, is_encoder_decoder=False)
    n = labels.shape[0] // 2
    nll = torch.nn.CrossEntropyLoss()(logits[:n, :-1].reshape(-1, logits.shape[-1]), labels[:n, 1:].reshape(-1))
    return all_logps[:n], all_logps[n:], nll


@pytest.mark.parametrize("loss", ["simpo", "cpo", "orpo"])
def test_reference_free_losses_equal_trl_on_the_same_batch(loss):
    pytest.importorskip("trl")
    from trl.experimental.cpo import CPOTrainer
    from trl.experimental.orpo import ORPOTrainer

    from offrl.prefs.config import PreferenceConfig
    from offrl.prefs.preference import reference_free_objective

    batch, logits, labels = _same_batch()
    beta = {"simpo": 2.0, "cpo": 0.1, "orpo": 0.1}[loss]
    config = PreferenceConfig(loss=loss, beta=beta, simpo_gamma=0.7, cpo_alpha=0.8, label_smoothing=0.0)
    average = loss in ("simpo", "orpo")
    ours, metrics = reference_free_objective(_FixedLogits(logits), batch, config, average)
    pi_c, pi_r, nll = _trl_side(logits, labels, average)
    fake = SimpleNamespace(beta=beta, alpha=0.0, label_smoothing=0.0, simpo_gamma=0.7,
                           accelerator=SimpleNamespace(device="cpu"))
    if loss == "orpo":
        losses, *_ = ORPOTrainer.odds_ratio_loss(fake, pi_c, pi_r)
        theirs = nll - losses.mean()  # ORPOTrainer.get_batch_loss_metrics
    else:
        fake.loss_type = "simpo" if loss == "simpo" else "sigmoid"
        losses, _, _ = CPOTrainer.cpo_loss(fake, pi_c, pi_r)
        theirs = losses.mean() + (0.0 if loss == "simpo" else 0.8) * nll  # cpo_alpha = 0 for pure SimPO
    print(f"{loss}: offrl {ours.item():.9f} trl {theirs.item():.9f} diff {abs(ours.item() - theirs.item()):.2e}")
    assert abs(ours.item() - theirs.item()) < 1e-6
    assert metrics["nll"].item() == pytest.approx(nll.item(), abs=1e-6)
    assert metrics["logps/chosen"].item() == pytest.approx(pi_c.mean().item(), abs=1e-6)


# --------------------------------------------------------------------------- trainer and command


@pytest.mark.parametrize("loss,beta,lr", [("simpo", 2.0, 2e-3), ("cpo", 0.5, 2e-3), ("orpo", 0.5, 2e-3)])
def test_reference_free_trainers_learn_without_a_reference(tiny_task, tiny_sft, tmp_path, loss, beta, lr):
    from offrl.prefs import PreferenceConfig, train_preferences

    cfg = PreferenceConfig(loss=loss, beta=beta, steps=40, batch_size=16, lr=lr, warmup_steps=5, log_every=20,
                           max_length=24, eval_fraction=0.2, kl_prompts=0)
    out = tmp_path / loss
    result = train_preferences(tiny_sft, tiny_task["pairs"], str(out), cfg, progress=False)
    first, last = result.metrics[0], result.metrics[-1]
    assert last["loss"] < first["loss"], result.metrics
    assert last["eval/margin"] > first["eval/margin"], (first, last)
    assert not os.path.exists(out / "reference_logps.safetensors")  # nothing about a reference was computed
    if loss == "orpo":
        assert last["log_odds_ratio"] > first["log_odds_ratio"]


def test_simpo_command(tiny_task, tiny_sft, tmp_path):
    from offrl.cli import main

    out = tmp_path / "simpo_cli"
    rc = main(["prefs", "simpo", "--model", tiny_sft, "--data", tiny_task["pairs"], "--out", str(out), "--steps", "4",
               "--batch-size", "8", "--max-length", "24", "--kl-prompts", "0", "--no-progress", "--simpo-gamma", "0.3"])
    assert rc == 0
    import json

    saved = json.load(open(out / "config.json"))
    assert saved["loss"] == "simpo" and saved["beta"] == 2.0 and saved["simpo_gamma"] == 0.3
