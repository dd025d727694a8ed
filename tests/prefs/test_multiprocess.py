"""`accelerate launch --num_processes 2` on CPU (gloo): DPO follows the one-process loss trajectory
for the same global batch (each process takes half of every global batch; DDP averages the
gradients; the logged loss is reduced over processes)."""

import json
import shutil
import subprocess
import sys

import pytest

pytest.importorskip("torch")
pytest.importorskip("accelerate")


@pytest.mark.slow  # two subprocess launches of torch + transformers: ~50 s on the shared 2-core machine
def test_two_processes_follow_the_one_process_loss_trajectory(tmp_path):
    from offrl.prefs.data import write_jsonl
    from offrl.prefs.task import TaskConfig, make_oracle_pairs, make_task, read_prompts

    paths = make_task(str(tmp_path / "task"), TaskConfig(train_prompts=200, eval_prompts=20, hidden_size=32,
                                                         intermediate_size=64, layers=2, heads=2))
    write_jsonl(str(tmp_path / "pairs.jsonl"), make_oracle_pairs(read_prompts(paths["prompts_train"]), seed=0))
    args = ["prefs", "dpo", "--model", paths["model"], "--data", str(tmp_path / "pairs.jsonl"), "--steps", "6",
            "--batch-size", "8", "--log-every", "1", "--lr", "1e-3", "--warmup-steps", "1", "--threads", "1",
            "--no-progress", "--eval-fraction", "0.1", "--kl-prompts", "0", "--mixed-precision", "no", "--save-every", "3"]
    one = subprocess.run([sys.executable, "-m", "offrl", *args, "--out", str(tmp_path / "one")],
                         capture_output=True, text=True, timeout=600)
    assert one.returncode == 0, one.stderr[-3000:]
    launcher = shutil.which("accelerate")
    assert launcher, "accelerate's launcher is not on PATH"
    two = subprocess.run([launcher, "launch", "--cpu", "--num_processes", "2", "--num_machines", "1", "--mixed_precision", "no",
                          "--dynamo_backend", "no", "-m", "offrl", *args, "--out", str(tmp_path / "two")],
                         capture_output=True, text=True, timeout=600)
    assert two.returncode == 0, two.stderr[-3000:]
    losses = [[json.loads(line)["loss"] for line in open(tmp_path / name / "metrics.jsonl")] for name in ("one", "two")]
    assert len(losses[0]) == len(losses[1]) == 6
    assert losses[0][0] != losses[0][-1]  # it trains
    assert losses[1] == pytest.approx(losses[0], abs=1e-5)
    assert sorted(p.name for p in (tmp_path / "two" / "checkpoints").iterdir()) == \
        sorted(p.name for p in (tmp_path / "one" / "checkpoints").iterdir())
