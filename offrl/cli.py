"""The ``offrl`` command: a thin argparse front over the Python API.

Each command lives in ``offrl/commands/<name>.py`` and exposes ``register(subparsers)``,
which adds its parser and sets ``func(args) -> int``. Flags are generated from the config
dataclasses (:func:`offrl.config.add_flags`), so a flag's default, type and valid range are
those of its field. Command modules import heavy libraries (JAX, torch) inside ``func`` only,
so ``offrl --help`` stays fast. No parser accepts abbreviations of a flag (``--eval-ever`` is
refused, not read as ``--eval-every``). User mistakes (:class:`offrl.errors.OffrlError`) print
one line and exit 2; ``--debug`` shows the traceback.

``offrl train --config.FIELD VALUE`` is ``--set FIELD=VALUE``: such pairs are taken out of the
command line before parsing (``args.config_flags``) and checked against the algorithm's config
by the command.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from offrl import __version__
from offrl.config import no_abbreviations
from offrl.errors import OffrlError

#: command name -> module; the order is the order of ``offrl --help``.
COMMANDS = (
    "quickstart",
    "inspect",
    "train",
    "sweep",
    "finetune",
    "evaluate",
    "plot",
    "export",
    "collect",
    "demo",
    "benchmark",
    "ope",
    "model",
    "prefs",
)

#: the prefix of ``--config.FIELD VALUE`` pairs.
CONFIG_FLAG = "--config."


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="offrl",
        description="Offline reinforcement learning from fixed, logged data.",
        allow_abbrev=False,
    )
    parser.add_argument("--version", action="version", version=f"offrl {__version__}")
    parser.add_argument("--debug", action="store_true", help="show full tracebacks on errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"offrl.commands.{name}").register(sub)
    return no_abbreviations(parser)


def split_config_flags(argv: list[str]) -> tuple[list[str], list[tuple[str, str | None]]]:
    """``(argv without them, [(flag, value), ...])`` for the ``--config.FIELD VALUE`` (or
    ``--config.FIELD=VALUE``) pairs of ``argv`` before any ``--``; a missing value is ``None``."""
    rest, pairs, i = [], [], 0
    while i < len(argv):
        item = argv[i]
        if item == "--":
            rest.extend(argv[i:])
            break
        if item.startswith(CONFIG_FLAG):
            if "=" in item:
                flag, value = item.split("=", 1)
            else:
                flag = item
                value = argv[i + 1] if i + 1 < len(argv) and not argv[i + 1].startswith("--") else None
                i += value is not None
            pairs.append((flag, value))
        else:
            rest.append(item)
        i += 1
    return rest, pairs


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argv, config_flags = split_config_flags(list(sys.argv[1:] if argv is None else argv))
    args = parser.parse_args(argv)
    if config_flags and not getattr(args, "accepts_config_flags", False):
        parser.error(f"unrecognized arguments: {config_flags[0][0]} ({CONFIG_FLAG}FIELD is a flag of offrl train)")
    args.config_flags = config_flags
    if not getattr(args, "func", None):
        parser.print_help()
        return 0 if args.command is None else 2
    try:
        return int(args.func(args) or 0)
    except OffrlError as exc:
        if args.debug:
            raise
        print(f"offrl: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except OSError as exc:  # a full disk or a read-only folder met outside offrl's own writers
        from offrl.run_folder import os_error_sentence

        error = os_error_sentence(exc)
        if error is None or args.debug:
            raise
        print(f"offrl: error: {error}", file=sys.stderr)
        return error.exit_code
    except KeyboardInterrupt:
        print("offrl: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
