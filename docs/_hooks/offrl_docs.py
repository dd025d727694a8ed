"""mkdocs hooks that generate reference pages from the code, so they cannot drift from it.

* ``<!-- offrl-cli-reference -->`` becomes the ``--help`` of every ``offrl`` command, from the
  parser ``offrl`` itself builds (:func:`offrl.cli.build_parser`; it imports neither JAX nor torch).
* ``<!-- offrl-api-modules: PACKAGE -->`` becomes one mkdocstrings ``::: PACKAGE.module`` block per
  module file of that package not already on the page, so a new module (an algorithm, an
  estimator, a trainer) appears in the API reference without editing it.
"""

from __future__ import annotations

import argparse
import os
import re
from pathlib import Path

MARKER = "<!-- offrl-cli-reference -->"
API_MARKER = re.compile(r"<!-- offrl-api-modules: ([\w.]+) -->")
ROOT = Path(__file__).resolve().parents[2]


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:  # argparse keeps its subparsers here; there is no public accessor
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _sections(parser: argparse.ArgumentParser, name: str, level: int) -> list[str]:
    out = [f"{'#' * level} `{name}`", "", "```text", parser.format_help().rstrip(), "```", ""]
    for child, sub in _subcommands(parser).items():
        out += _sections(sub, f"{name} {child}", min(level + 1, 4))
    return out


def cli_reference() -> str:
    os.environ["COLUMNS"] = "100"  # argparse wraps to the terminal width; fix it for the page
    from offrl.cli import build_parser

    parser = build_parser()
    lines = ["```text", parser.format_help().rstrip(), "```", ""]
    for name, sub in _subcommands(parser).items():
        lines += _sections(sub, f"offrl {name}", 2)
    return "\n".join(lines)


def api_modules(package: str, listed: set[str]) -> str:
    folder = ROOT.joinpath(*package.split("."))
    names = sorted(p.stem for p in folder.glob("*.py") if not p.stem.startswith("_"))
    return "\n\n".join(f"::: {package}.{name}" for name in names if f"{package}.{name}" not in listed)


def on_page_markdown(markdown: str, page, config, files) -> str:
    if MARKER in markdown:
        markdown = markdown.replace(MARKER, cli_reference())
    listed = set(re.findall(r"^::: ([\w.]+)", markdown, re.M))
    return API_MARKER.sub(lambda m: api_modules(m.group(1), listed), markdown)
