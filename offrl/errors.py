"""User-facing errors.

Every mistake a user can make (a bad file, key, row or flag) raises an :class:`OffrlError`
whose message is one sentence naming the file, key, index or flag and the fix. The CLI
prints that sentence and exits with code 2; tracebacks are for bugs, behind ``--debug``.
"""

from __future__ import annotations


class OffrlError(Exception):
    """A user mistake, reported as one clear sentence (CLI exit code 2)."""

    exit_code = 2


class DatasetError(OffrlError):
    """A dataset that cannot be loaded or is malformed."""


class ConfigError(OffrlError):
    """A bad configuration value or command-line flag."""


class DivergenceError(OffrlError):
    """Training produced a NaN/inf loss."""

    exit_code = 3


class CheckpointError(OffrlError):
    """A checkpoint that is damaged, truncated, or does not match the run (CLI exit code 2)."""


class RunFolderError(OffrlError):
    """A run folder that cannot be written: a full disk, a read-only folder, another writer's lock."""
