"""Scaling the preference trainers: precision chosen by hardware, gradient accumulation equal to a
bigger batch, the launch layout recorded in config.json."""

import json
import os

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("accelerate")

from offrl.errors import ConfigError  # noqa: E402
from offrl.prefs import PreferenceConfig, train_preferences  # noqa: E402
from offrl.prefs.loop import resolve_mixed_precision  # noqa: E402


@pytest.mark.parametrize("requested, cuda, bf16, expected", [
    ("auto", False, False, "no"),      # CPU: fp32
    ("auto", True, True, "bf16"),      # Ampere or later
    ("auto", True, False, "fp16"),     # older GPU: fp16 with loss scaling
    ("fp16", True, True, "fp16"),      # an explicit choice is kept
    ("no", True, True, "no"),
])
def test_mixed_precision_is_chosen_by_hardware(requested, cuda, bf16, expected):
    mode, reason = resolve_mixed_precision(requested, cuda, bf16)
    assert mode == expected and reason
    assert ("auto" in reason) == (requested == "auto")


def test_unknown_mixed_precision_is_one_sentence():
    with pytest.raises(ConfigError, match="--mixed-precision fp8 is unknown"):
        resolve_mixed_precision("fp8", False, False)


def test_a_launch_that_started_one_of_several_processes_is_refused():
    from offrl.prefs.loop import check_launch

    simple = {"ACCELERATE_USE_CPU": "False", "ACCELERATE_MIXED_PRECISION": "no", "MASTER_ADDR": "127.0.0.1",
              "MASTER_PORT": "29500"}  # what `accelerate launch --num_processes 2` exports on a CPU machine
    with pytest.raises(ConfigError, match="started one process here"):
        check_launch(simple)
    check_launch({**simple, "WORLD_SIZE": "2", "RANK": "1", "LOCAL_RANK": "1"})  # torchrun / --multi_gpu
    check_launch({"ACCELERATE_USE_CPU": "False"})  # accelerate launch with one process
    check_launch({})  # plain python


def test_deepspeed_refuses_what_this_loop_cannot_do_there():
    from accelerate.utils import DistributedType

    from offrl.prefs.loop import check_deepspeed

    cfg = PreferenceConfig(gradient_accumulation_steps=2)
    check_deepspeed(DistributedType.MULTI_GPU, cfg)
    with pytest.raises(ConfigError, match="--gradient-accumulation-steps 2 is not supported under DeepSpeed"):
        check_deepspeed(DistributedType.DEEPSPEED, cfg)
    with pytest.raises(ConfigError, match="--save-every 5"):
        check_deepspeed(DistributedType.DEEPSPEED, PreferenceConfig(save_every=5))
    check_deepspeed(DistributedType.DEEPSPEED, PreferenceConfig())


def _weights(folder, direct=False):
    from safetensors.torch import load_file

    return load_file(os.path.join(folder, "" if direct else "model", "model.safetensors"))


def test_gradient_accumulation_equals_a_bigger_batch(tiny_task, tmp_path):
    """batch 8 x 2 accumulation steps and batch 16 x 1 draw the same 16 pairs per optimizer step and
    take the same step: the mean of two half-batch mean losses is the full-batch mean (float tolerance)."""
    base = dict(loss="dpo", beta=0.5, steps=4, lr=2e-3, warmup_steps=1, log_every=1, max_length=24,
                eval_fraction=0.0, kl_prompts=0, mixed_precision="no")
    runs = {}
    for name, batch, k in (("big", 16, 1), ("accumulated", 8, 2), ("small", 8, 1)):
        cfg = PreferenceConfig(batch_size=batch, gradient_accumulation_steps=k, **base)
        runs[name] = train_preferences(tiny_task["model"], tiny_task["pairs"], str(tmp_path / name), cfg, progress=False)
    losses = {name: [row["loss"] for row in run.metrics] for name, run in runs.items()}
    assert len(losses["big"]) == 4 and losses["big"][0] != losses["big"][-1]  # it trains
    assert losses["accumulated"] == pytest.approx(losses["big"], rel=1e-5, abs=1e-6)
    assert losses["small"][1:] != pytest.approx(losses["big"][1:], rel=1e-3)  # the tolerance can fail
    # weights, relative to how far training moved them: Adam's first steps are ~lr * sign(g), so an
    # element whose gradient is ~0 can move by a visible amount on float noise alone; a norm over
    # all weights stays tight
    start = _weights(tiny_task["model"], direct=True)
    big, acc, small = (_weights(runs[name].path) for name in ("big", "accumulated", "small"))
    moved = sum(float((big[k] - start[k]).pow(2).sum()) for k in big) ** 0.5
    gap = lambda other: sum(float((other[k] - big[k]).pow(2).sum()) for k in big) ** 0.5  # noqa: E731
    assert gap(acc) < 1e-3 * moved, (gap(acc), moved)
    assert gap(small) > 0.05 * moved, (gap(small), moved)  # a different batch is far outside it
    launch = json.load(open(tmp_path / "accumulated" / "config.json"))["launch"]
    assert launch == {"processes": 1, "device": "cpu", "mixed_precision": "fp32", "mixed_precision_reason": "requested",
                      "batch_per_process": 8, "gradient_accumulation_steps": 2, "examples_per_optimizer_step": 16}


def test_accumulated_batch_larger_than_the_data_is_one_sentence(tiny_task, tmp_path):
    from offrl.errors import DatasetError

    cfg = PreferenceConfig(loss="dpo", steps=1, batch_size=400, gradient_accumulation_steps=4, max_length=24,
                           eval_fraction=0.0, kl_prompts=0)
    with pytest.raises(DatasetError, match="--gradient-accumulation-steps 4"):
        train_preferences(tiny_task["model"], tiny_task["pairs"], str(tmp_path / "r"), cfg, progress=False)
