import pytest

try:  # the prefs tests need the optional [llm] extra; every test module skips itself without torch
    import torch
except ImportError:  # pragma: no cover
    torch = None


@pytest.fixture(autouse=True, scope="session")
def _one_torch_thread():
    """One intra-op thread for the prefs tests (session-wide so that it also covers the session fixtures):
    on a shared 2-core machine two threads are up to ~10x slower for these tiny models. Only torch is affected."""
    if torch is None:
        yield
        return
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    import transformers

    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    yield
    torch.set_num_threads(previous)


@pytest.fixture(scope="session")
def tiny_task(tmp_path_factory):
    """The digits task with a very small Llama (2 layers, hidden 32) and oracle preference pairs."""
    from offrl.prefs.data import write_jsonl
    from offrl.prefs.task import TaskConfig, make_oracle_pairs, make_task, read_prompts

    root = tmp_path_factory.mktemp("digits")
    cfg = TaskConfig(train_prompts=600, eval_prompts=50, hidden_size=32, intermediate_size=64, layers=2, heads=2)
    paths = make_task(str(root / "task"), cfg)
    prompts = read_prompts(paths["prompts_train"])
    paths["pairs"] = str(root / "pairs.jsonl")
    write_jsonl(paths["pairs"], make_oracle_pairs(prompts, seed=0))
    return paths


@pytest.fixture(scope="session")
def tiny_sft(tiny_task, tmp_path_factory):
    """The tiny model after a short SFT on the noisy demonstrations (the reference policy)."""
    from offrl.prefs.config import SFTConfig
    from offrl.prefs.sft import train_sft

    out = tmp_path_factory.mktemp("sft")
    cfg = SFTConfig(steps=150, batch_size=32, lr=5e-3, warmup_steps=10, log_every=50, max_length=24, eval_fraction=0.1)
    result = train_sft(tiny_task["model"], tiny_task["demos"], str(out), cfg, progress=False)
    assert result.metrics[-1]["loss"] < result.metrics[0]["loss"]  # BC learns
    return result.model_path


@pytest.fixture(scope="session")
def rl_task(tmp_path_factory):
    """A policy good enough for online RL to improve on (~15 s): the digits task with 2000 prompts,
    hidden 32, SFT for 300 steps (true reward of samples ~0.27)."""
    from offrl.prefs.sft import train_sft
    from offrl.prefs.config import SFTConfig
    from offrl.prefs.task import TaskConfig, make_task

    root = tmp_path_factory.mktemp("rl")
    cfg = TaskConfig(train_prompts=2000, eval_prompts=100, hidden_size=32, intermediate_size=64, layers=2, heads=2)
    paths = make_task(str(root / "task"), cfg)
    sft = SFTConfig(steps=300, batch_size=64, lr=5e-3, warmup_steps=20, log_every=100, max_length=24,
                    eval_fraction=0.05)
    paths["sft"] = train_sft(paths["model"], paths["demos"], str(root / "sft"), sft, progress=False).model_path
    return paths
