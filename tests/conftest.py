import os

import pytest

os.environ.setdefault("MPLBACKEND", "Agg")


@pytest.fixture(autouse=True)
def _offrl_home(tmp_path, monkeypatch):
    """Every test gets its own empty cache folder, so nothing leaks between tests."""
    monkeypatch.setenv("OFFRL_HOME", str(tmp_path / "offrl_home"))


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_programs():
    """Drop JAX's compiled executables after each test module. A one-process suite compiles
    thousands of programs; XLA's CPU compiler has crashed (SIGSEGV/SIGABRT inside
    ``backend_compile``) late in such sessions, and each module's programs are not reused by the next."""
    yield
    import sys

    if "jax" in sys.modules:
        sys.modules["jax"].clear_caches()
