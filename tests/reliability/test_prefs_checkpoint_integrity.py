"""Preference-side checkpoints (safetensors folders) carry a ``checksums.sha256`` manifest;
a damaged file is refused naming it, and resume falls back to the newest intact checkpoint."""

import hashlib
import os

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from offrl.checkpoint import CheckpointWarning  # noqa: E402
from offrl.errors import CheckpointError  # noqa: E402


@pytest.fixture
def model_and_optimizer():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=16, hidden_size=8, intermediate_size=16, num_hidden_layers=1, num_attention_heads=2,
                      num_key_value_heads=2, max_position_embeddings=16)
    model = LlamaForCausalLM(cfg)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.tensor([[1, 2, 3]]), labels=torch.tensor([[1, 2, 3]])).loss.backward()
    optimizer.step()
    return model, optimizer


def _save(directory, model, optimizer, step, **kw):
    from offrl.prefs.checkpoint import save_checkpoint

    return save_checkpoint(str(directory), model, None, optimizer, step, **kw)


def test_manifest_lists_every_file_with_its_sha256(tmp_path, model_and_optimizer):
    path = _save(tmp_path, *model_and_optimizer, 5, write_extra=lambda folder: open(os.path.join(folder, "value.safetensors"), "wb").write(b"x"))
    lines = open(os.path.join(path, "checksums.sha256")).read().splitlines()
    listed = {line[66:]: line[:64] for line in lines}
    on_disk = {os.path.relpath(os.path.join(r, f), path) for r, _, fs in os.walk(path) for f in fs} - {"checksums.sha256"}
    assert set(listed) == on_disk and {"trainer_state.json", "optimizer.safetensors", "value.safetensors"} <= on_disk
    for rel, digest in listed.items():
        assert hashlib.sha256(open(os.path.join(path, rel), "rb").read()).hexdigest() == digest


@pytest.mark.parametrize("victim", ["optimizer.safetensors", "model/model.safetensors", "trainer_state.json"])
def test_damaged_file_is_refused_naming_it_and_resume_falls_back(tmp_path, model_and_optimizer, victim):
    from offrl.prefs.checkpoint import latest_checkpoint, load_checkpoint_state

    model, optimizer = model_and_optimizer
    older = _save(tmp_path, model, optimizer, 5)
    newest = _save(tmp_path, model, optimizer, 10)
    target = os.path.join(newest, victim)
    data = bytearray(open(target, "rb").read())
    data[len(data) // 2] ^= 0x01
    open(target, "wb").write(bytes(data))
    with pytest.raises(CheckpointError, match="is damaged") as exc:
        load_checkpoint_state(newest, optimizer)
    assert target in str(exc.value) and "\n" not in str(exc.value)
    with pytest.warns(CheckpointWarning, match=r"step_00000010 is damaged.*falling back .*step_00000005"):
        assert latest_checkpoint(str(tmp_path)) == older
    assert load_checkpoint_state(older, optimizer)["step"] == 5


def test_truncated_file_and_missing_file_are_refused(tmp_path, model_and_optimizer):
    from offrl.prefs.checkpoint import latest_checkpoint, verify_checkpoint

    path = _save(tmp_path, *model_and_optimizer, 5)
    open(os.path.join(path, "optimizer.safetensors"), "wb").close()
    with pytest.raises(CheckpointError, match="optimizer.safetensors does not match"):
        verify_checkpoint(path)
    os.remove(os.path.join(path, "optimizer.safetensors"))
    with pytest.raises(CheckpointError, match="optimizer.safetensors is missing"):
        verify_checkpoint(path)
    with pytest.raises(CheckpointError, match="no intact checkpoint"):
        latest_checkpoint(str(tmp_path))


def test_checkpoint_without_manifest_loads_with_a_warning(tmp_path, model_and_optimizer):
    from offrl.prefs.checkpoint import load_checkpoint_state

    model, optimizer = model_and_optimizer
    path = _save(tmp_path, model, optimizer, 5)
    os.remove(os.path.join(path, "checksums.sha256"))
    with pytest.warns(CheckpointWarning, match="loading it unverified"):
        assert load_checkpoint_state(path, optimizer)["step"] == 5
    open(os.path.join(path, "optimizer.safetensors"), "wb").write(b"\x00" * 7)
    with pytest.warns(CheckpointWarning), pytest.raises(CheckpointError, match="is unreadable"):
        load_checkpoint_state(path, optimizer)


def test_stale_tmp_folder_is_removed_at_the_next_save(tmp_path, model_and_optimizer):
    os.makedirs(tmp_path / "step_00000007.tmp" / "model")
    _save(tmp_path, *model_and_optimizer, 8)
    assert sorted(os.listdir(tmp_path)) == ["step_00000008"]
