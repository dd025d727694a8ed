"""Reference log-probs are computed once, cached in the run folder and reused on resume."""

import os
import shutil

import pytest

torch = pytest.importorskip("torch")


def test_resume_reuses_the_cached_reference_logps(tiny_task, tiny_sft, tmp_path, monkeypatch):
    from offrl.prefs import PreferenceConfig, preference, train_preferences

    out = tmp_path / "dpo"
    cfg = PreferenceConfig(loss="dpo", beta=0.5, steps=4, batch_size=16, lr=1e-3, warmup_steps=1, log_every=2,
                           save_every=2, max_length=24, eval_fraction=0.2, kl_prompts=0)
    train_preferences(tiny_sft, tiny_task["pairs"], str(out), cfg, progress=False)
    cache = out / "reference_logps.safetensors"
    stamp = os.stat(cache).st_mtime_ns
    shutil.rmtree(out / "checkpoints" / "step_00000004")

    def refuse(*args, **kwargs):
        raise AssertionError("reference log-probs were recomputed on resume")

    monkeypatch.setattr(preference, "reference_logps", refuse)
    resumed = train_preferences(tiny_sft, tiny_task["pairs"], str(out), cfg, resume=True, progress=False)
    assert [r["step"] for r in resumed.metrics] == [2, 4]
    assert os.stat(cache).st_mtime_ns == stamp
    # other data (here: another max_length, so other tokens) changes the fingerprint: recomputed, not reused
    with pytest.raises(AssertionError, match="recomputed"):
        train_preferences(tiny_sft, tiny_task["pairs"], str(out), PreferenceConfig(**{**cfg.to_json(), "max_length": 20}),
                          resume=True, progress=False)
