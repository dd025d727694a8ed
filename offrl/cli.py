"""The ``offrl`` command: a thin argparse front over the Python API.

Each command lives in ``offrl/commands/<name>.py`` and exposes ``register(subparsers)``,
which adds its parser and sets ``func(args) -> int``. Command modules import heavy
libraries (JAX, torch) inside ``func`` only, so ``offrl --help`` stays fast.
User mistakes (:class:`offrl.errors.OffrlError`) print one line and exit 2; ``--debug``
shows the traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from offrl import __version__
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
    "prefs",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="offrl",
        description="Offline reinforcement learning from fixed, logged data.",
    )
    parser.add_argument("--version", action="version", version=f"offrl {__version__}")
    parser.add_argument("--debug", action="store_true", help="show full tracebacks on errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        module_name = f"offrl.commands.{name}"
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name == module_name:
                continue  # command not built yet
            raise
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        misspelt = [u for u in unknown if u.startswith("--config.")]
        if misspelt and getattr(args, "command", None) == "train":
            from offrl.commands.train import unknown_config_flag_message

            print(f"offrl: error: {unknown_config_flag_message(args.algo, misspelt[0])}", file=sys.stderr)
            return 2
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
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
