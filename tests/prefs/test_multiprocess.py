"""`accelerate launch --num_processes 2` on CPU (gloo): DPO follows the one-process loss trajectory
for the same global batch (each process takes half of every global batch; DDP averages the
gradients; the logged loss is reduced over processes), the main process alone writes the run
folder, and a 2-process run resumed from its checkpoint ends where the uninterrupted one did."""

import json
import re
import shutil
import subprocess
import sys

import pytest

pytest.importorskip("torch")
pytest.importorskip("accelerate")


@pytest.mark.slow  # three subprocess launches of torch + transformers: ~100 s on the shared 2-core machine
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
    # --multi_gpu is accelerate's torchrun launcher; on CPU (--cpu alone would start ONE process) the
    # trainer's Accelerator joins the two processes over gloo
    launch = [launcher, "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1", "--mixed_precision", "no",
              "--dynamo_backend", "no", "-m", "offrl", *args]
    two = subprocess.run([*launch, "--out", str(tmp_path / "two")], capture_output=True, text=True, timeout=600)
    assert two.returncode == 0, two.stderr[-3000:]
    assert two.stdout.count("model: ") == 1, two.stdout  # one summary table, from the main process
    record = json.loads((tmp_path / "two" / "config.json").read_text())["launch"]
    assert record["processes"] == 2 and record["mixed_precision"] == "fp32" and record["batch_per_process"] == 4
    assert re.search(r"2 process\(es\) on cpu(:0)?, precision fp32", two.stdout), two.stdout[-500:]
    losses = [[json.loads(line)["loss"] for line in open(tmp_path / name / "metrics.jsonl")] for name in ("one", "two")]
    assert len(losses[0]) == len(losses[1]) == 6
    assert losses[0][0] != losses[0][-1]  # it trains
    print("one process :", losses[0])
    print("two processes:", losses[1], "max |diff|", max(abs(a - b) for a, b in zip(*losses)))
    assert losses[1] == pytest.approx(losses[0], abs=1e-5)
    assert sorted(p.name for p in (tmp_path / "two" / "checkpoints").iterdir()) == \
        sorted(p.name for p in (tmp_path / "one" / "checkpoints").iterdir())
    # as if the 2-process run had been killed after its step-3 checkpoint: resume it with 2 processes
    shutil.copytree(tmp_path / "two", tmp_path / "cut")
    shutil.rmtree(tmp_path / "cut" / "checkpoints" / "step_00000006")
    shutil.rmtree(tmp_path / "cut" / "model")
    resumed = subprocess.run([*launch, "--out", str(tmp_path / "cut"), "--resume"], capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    rows = [json.loads(line) for line in open(tmp_path / "cut" / "metrics.jsonl")]
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5, 6]
    print("resumed at 3 :", [r["loss"] for r in rows])
    assert [r["loss"] for r in rows] == pytest.approx(losses[1], abs=1e-5)
    from safetensors.torch import load_file

    a, b = (load_file(str(tmp_path / name / "model" / "model.safetensors")) for name in ("two", "cut"))
    for key in a:
        assert float((a[key] - b[key]).abs().max()) < 1e-5, key
