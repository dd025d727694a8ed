"""The one loop of the online RLHF trainers (PPO, GRPO, RLOO).

Each iteration: a batch of prompts -> :func:`offrl.prefs.rollout.generate_rollout` (G samples
per prompt, KV cache) -> log-probs of the samples under the policy (``pi_old``) and the frozen
reference -> per-token KL estimate -> reward (a reward model or a program) -> the algorithm's
``update`` (advantages and its optimisation epochs) -> the KL controller -> metrics, checkpoint.

Metrics carry the names RLHF users know: ``objective/kl`` (mean per-sequence sum of the KL
estimate), ``objective/entropy`` (mean per-sequence sum of the policy's token entropy),
``objective/scores`` (the reward the policy is trained on), ``objective/non_score_reward``
(``-beta * KL``), ``objective/rlhf_reward`` (their sum), ``objective/true_reward`` where a
program can score the task, ``objective/rm_std`` for ensembles, ``policy/clipfrac``,
``policy/approxkl``, ``val/vf_loss``. Checkpoints are safetensors (the policy with
``save_pretrained``, extra modules with ``safetensors.torch.save_model``) plus JSON state.
"""

from __future__ import annotations

import json
import os
import random
import time
from pathlib import Path
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch

from offrl.progress import ProgressBar
from offrl.errors import DivergenceError
from offrl.prefs import rl_losses as R
from offrl.prefs.checkpoint import latest_checkpoint, load_checkpoint_state, save_checkpoint
from offrl.prefs.config import PolicyGradientConfig
from offrl.prefs.loop import write_json
from offrl.run_folder import MetricsLog, first_non_finite, truncate_metrics
from offrl.prefs.modeling import cosine_warmup
from offrl.prefs.rewards import Scores, true_reward
from offrl.prefs.rollout import Rollout, generate_rollout, response_logps
from offrl.prefs.runs import TrainResult, finish_run

Tensor = torch.Tensor


@dataclass
class ScoredRollout:
    """A rollout with everything the updates need: ``logps`` (pi_old) and ``ref_logps`` per token,
    the per-token ``kl`` estimate, ``entropy``, the reward ``scores`` and (if a program can score
    the task) the ``true`` reward."""

    rollout: Rollout
    logps: Tensor
    ref_logps: Tensor
    kl: Tensor
    entropy: Tensor
    scores: Scores
    true: Tensor | None

    @property
    def mask(self) -> Tensor:
        return self.rollout.response_mask


def prompt_batch(prompts: Sequence[str], batch_size: int, seed: int, step: int) -> list[str]:
    """The prompts of iteration ``step``: a sample without replacement fixed by ``(seed, step)``,
    so that a resumed run sees the same batches."""
    rng = random.Random(seed * 1_000_003 + step)
    return [prompts[i] for i in rng.sample(range(len(prompts)), min(batch_size, len(prompts)))]


@torch.no_grad()
def score_rollout(policy, reference, rollout: Rollout, reward, config: PolicyGradientConfig) -> ScoredRollout:
    """Old and reference log-probs, the KL estimate, the entropy and the rewards of a rollout. ``log pi_old``
    and the entropy come from the sampling pass where it recorded them (a policy pass otherwise)."""
    sampled = rollout.sampled_logps(config.temperature)
    logps, entropy, _ = sampled + (None,) if sampled else response_logps(policy, rollout, config.temperature,
                                                                          entropy=True)
    ref_logps, _, _ = response_logps(reference, rollout, config.temperature)
    kl = R.kl_estimate(logps, ref_logps, config.kl_estimator) * rollout.response_mask
    scores = reward(rollout.prompts, rollout.texts)
    if config.whiten_rewards:
        s = scores.score
        scores = Scores((s - s.mean()) / (s.std() + 1e-8) + s.mean() if len(s) > 1 else s, scores.mean, scores.std,
                        scores.parts)
    return ScoredRollout(rollout, logps, ref_logps, kl, entropy, scores, true_reward(rollout.prompts, rollout.texts))


def rollout_metrics(batch: ScoredRollout, kl_coef: float) -> dict[str, float]:
    """The objective/* metrics of a scored rollout."""
    kl_seq = batch.kl.sum(-1)
    non_score = -kl_coef * kl_seq
    lengths = batch.mask.sum(-1).float()
    row = {
        "objective/kl": float(kl_seq.mean()),
        "objective/entropy": float(batch.entropy.sum(-1).mean()),
        "objective/scores": float(batch.scores.score.mean()),
        "objective/non_score_reward": float(non_score.mean()),
        "objective/rlhf_reward": float((batch.scores.score.to(non_score) + non_score).mean()),
        "objective/rm_mean": float(batch.scores.mean.mean()),
        "objective/rm_std": float(batch.scores.std.mean()),
        "response/length": float(lengths.mean()),
        "kl_coef": float(kl_coef),
    }
    if batch.true is not None:
        row["objective/true_reward"] = float(batch.true.mean())
    for name, part in batch.scores.parts.items():  # each combined reward's own mean
        row[f"rewards/{name}"] = float(part.mean())
    row.update(guard_metrics(batch))
    return row


def guard_metrics(batch: ScoredRollout) -> dict[str, float]:
    """What the guardrails watch on the policy's own samples: the correlation of the proxy reward
    (the reward model's mean) with the response length and with the true reward, and, for group
    rollouts, the share of within-group pairs (of different true reward) that the proxy orders as the
    true reward does."""
    from offrl.prefs.reward_model import pearson

    proxy = batch.scores.mean.float().cpu()
    lengths = batch.mask.sum(-1).float().cpu()
    row = {"guard/length_correlation": pearson(proxy, lengths)}
    if batch.true is not None:
        true = batch.true.float().cpu()
        row["guard/proxy_true_correlation"] = pearson(proxy, true)
        G = batch.rollout.group_size
        if G > 1:
            p, t = proxy.view(-1, G), true.view(-1, G)
            dp, dt = p[:, :, None] - p[:, None, :], t[:, :, None] - t[:, None, :]
            informative = dt != 0
            if informative.any():
                row["guard/pair_agreement"] = float(((dp * dt) > 0)[informative].float().mean())
    return row


def _save_modules(path: str, modules: dict[str, torch.nn.Module]) -> None:
    from safetensors.torch import save_model

    for name, module in modules.items():
        save_model(module, os.path.join(path, f"{name}.safetensors"))


def _load_modules(path: str, modules: dict[str, torch.nn.Module]) -> None:
    from safetensors.torch import load_model

    for name, module in modules.items():
        load_model(module, os.path.join(path, f"{name}.safetensors"))


def run_policy_gradient(
    *,
    trainer: str,
    config: PolicyGradientConfig,
    out: str,
    prompts: Sequence[str],
    policy,
    reference,
    tokenizer,
    reward,
    update: Callable[[ScoredRollout, float, Callable[[Tensor], None], int], dict[str, float]],
    modules: dict[str, torch.nn.Module] | None = None,
    group_size: int = 1,
    resume: bool = False,
    progress: bool = True,
    callbacks: Sequence[Callable[[dict[str, Any]], None]] = (),
    report: dict[str, Any] | None = None,
) -> TrainResult:
    """Run ``config.steps`` iterations; ``update(batch, kl_coef, optimizer_step, step)`` does the
    algorithm's part and calls ``optimizer_step(loss)`` for each gradient step. ``callbacks`` see
    every logged row (the guardrails monitor warns from there)."""
    from offrl.locking import RunLock

    os.makedirs(out, exist_ok=True)
    with RunLock(out):
        return _run_policy_gradient(trainer, config, out, prompts, policy, reference, tokenizer, reward, update,
                                    modules, group_size, resume, progress, callbacks, report)


def _run_policy_gradient(trainer, config, out, prompts, policy, reference, tokenizer, reward, update, modules,
                         group_size, resume, progress, callbacks, report) -> TrainResult:
    from offrl.prefs.guard import GuardMonitor

    modules = modules or {}
    callbacks = [GuardMonitor(out, config.kl_budget), *callbacks]
    ckpt_dir = os.path.join(out, "checkpoints")
    torch.manual_seed(config.seed)
    params = [p for p in policy.parameters() if p.requires_grad]
    for m in modules.values():
        params += [p for p in m.parameters() if p.requires_grad and all(p is not q for q in params)]
    optimizer = torch.optim.AdamW(params, lr=config.lr, weight_decay=config.weight_decay)
    controller = R.kl_controller_init(config.kl_coef, config.kl_target, config.kl_horizon)
    start = 0
    ckpt = latest_checkpoint(ckpt_dir) if resume else None
    if ckpt is not None:
        state = load_checkpoint_state(ckpt, optimizer)
        _load_modules(ckpt, modules)
        start = int(state["step"])
        controller = controller._replace(coef=float(state["extra"]["kl_coef"]))
    history = truncate_metrics(os.path.join(out, "metrics.jsonl"), start)
    log = MetricsLog(Path(out), rows=history, tensorboard=config.tensorboard)
    callbacks[0].restart(history)

    def optimizer_step(loss: Tensor) -> None:
        loss.backward()
        if config.grad_clip:
            torch.nn.utils.clip_grad_norm_(params, config.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    bar = ProgressBar(bool(progress), total=config.steps, title=trainer, start=start)
    running: list[dict[str, float]] = []
    t0, samples = time.perf_counter(), 0
    policy.train()
    for m in modules.values():
        m.train()
    try:
        for step in range(start, config.steps):
            lr = config.lr * cosine_warmup(step, config.steps, config.warmup_steps)
            for group in optimizer.param_groups:
                group["lr"] = lr
            batch_prompts = prompt_batch(prompts, config.batch_size, config.seed, step)
            rollout = generate_rollout(policy, tokenizer, batch_prompts, group_size, config.max_new_tokens,
                                       config.temperature, seed=config.seed * 1_000_003 + step)
            batch = score_rollout(policy, reference, rollout, reward, config)
            row = rollout_metrics(batch, controller.coef)
            row.update(update(batch, controller.coef, optimizer_step, step))
            controller = R.kl_controller_update(controller, row["objective/kl"], len(rollout.texts))
            samples += len(rollout.texts)
            running.append(row)
            done = step + 1
            if done % config.log_every == 0 or done == config.steps:
                logged = {k: sum(r[k] for r in running) / len(running) for k in running[0]}
                bad = first_non_finite(logged)
                if bad is not None:
                    raise DivergenceError(f"iteration {done}: '{bad[0]}' became {bad[2]} ({logged}); "
                                          "lower --lr or raise --kl-coef.")
                logged.update(step=done, lr=lr, samples_per_s=samples / max(time.perf_counter() - t0, 1e-9))
                history.append(logged)
                log.add([logged])
                for callback in callbacks:
                    callback(logged)
                running, samples, t0 = [], 0, time.perf_counter()
                bar.update(done, f"score {logged['objective/scores']:.3f} kl {logged['objective/kl']:.2f}")
            else:
                bar.update(done)
            if config.save_every and done % config.save_every == 0 and done < config.steps:
                save_checkpoint(ckpt_dir, policy, tokenizer, optimizer, done, extra={"kl_coef": controller.coef},
                                write_extra=lambda folder: _save_modules(folder, modules))
    finally:
        bar.close()
        log.close()
    final = os.path.join(out, "model")
    policy.save_pretrained(final)
    tokenizer.save_pretrained(final)
    _save_modules(out, modules)
    if config.save_every:
        save_checkpoint(ckpt_dir, policy, tokenizer, optimizer, config.steps, extra={"kl_coef": controller.coef},
                        write_extra=lambda folder: _save_modules(folder, modules))
    write_json(os.path.join(out, "kl_controller.json"), {"kl_coef": controller.coef, "target": controller.target})
    return finish_run(out, history, report)


def minibatch_indices(n: int, minibatches: int, seed: int) -> list[Tensor]:
    """A fixed-seed shuffle of ``range(n)`` cut into ``minibatches`` parts."""
    g = torch.Generator().manual_seed(seed)
    order = torch.randperm(n, generator=g)
    return [part for part in order.chunk(minibatches) if len(part)]
