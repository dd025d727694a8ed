"""Peak RSS of DPO with a separate reference copy vs LoRA with the adapter disabled as the reference.

A locally initialised Llama (hidden 512, 8 layers, ~25M parameters) on the digits task; each
configuration runs in its own process (``ru_maxrss``), 3 DPO steps of 8 pairs, the KL monitor on
(so the reference stays in memory while training).

    PYTHONPATH=$PWD python benchmarks/lora_memory.py /tmp/lora_mem
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys


def build(root: str) -> None:
    from offrl.prefs.data import write_jsonl
    from offrl.prefs.task import TaskConfig, make_oracle_pairs, make_task, read_prompts

    paths = make_task(os.path.join(root, "task"), TaskConfig(train_prompts=200, eval_prompts=10, hidden_size=512,
                                                             intermediate_size=1376, layers=8, heads=8))
    write_jsonl(os.path.join(root, "pairs.jsonl"), make_oracle_pairs(read_prompts(paths["prompts_train"]), seed=0))
    shutil.copytree(paths["model"], os.path.join(root, "reference_copy"))  # another folder: a second copy is loaded


def run(root: str, mode: str) -> None:
    import torch

    from offrl.prefs import PreferenceConfig, train_preferences
    from offrl.prefs.modeling import count_parameters, load_causal_lm

    torch.set_num_threads(1)
    model = os.path.join(root, "task", "model")
    kw = dict(loss="dpo", steps=3, batch_size=8, lr=1e-4, warmup_steps=0, log_every=3, max_length=24,
              eval_fraction=0.0, kl_prompts=2, kl_max_new_tokens=4)
    if mode == "full+reference":
        cfg = PreferenceConfig(**kw)
    elif mode == "lora+reference":
        cfg = PreferenceConfig(**kw, lora="8,16,0", reference=os.path.join(root, "reference_copy"))
    else:  # lora, the reference = adapter disabled
        cfg = PreferenceConfig(**kw, lora="8,16,0")
    train_preferences(model, os.path.join(root, "pairs.jsonl"), os.path.join(root, mode), cfg, progress=False)
    params = count_parameters(load_causal_lm(model))
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"mode": mode, "peak_rss_mb": round(peak_mb, 1), "parameters": params}))


if __name__ == "__main__":
    root = sys.argv[1]
    if len(sys.argv) > 2:
        run(root, sys.argv[2])
        sys.exit(0)
    if not os.path.exists(os.path.join(root, "pairs.jsonl")):
        build(root)
    for mode in ("full+reference", "lora+reference", "lora"):
        out = subprocess.run([sys.executable, __file__, root, mode], capture_output=True, text=True, env=os.environ)
        print(out.stdout.strip().splitlines()[-1] if out.stdout.strip() else out.stderr[-2000:])
