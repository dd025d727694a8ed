import os

import pytest

os.environ.setdefault("MPLBACKEND", "Agg")


@pytest.fixture(autouse=True)
def _offrl_home(tmp_path, monkeypatch):
    """Every test gets its own empty cache folder, so nothing leaks between tests."""
    monkeypatch.setenv("OFFRL_HOME", str(tmp_path / "offrl_home"))
