"""mkdocs hook: fill ``<!-- offrl-cli-reference -->`` with the ``--help`` of every ``offrl`` command.

The text comes from the parser ``offrl`` itself builds (:func:`offrl.cli.build_parser`), so the
reference cannot drift from the flags; building the parser imports neither JAX nor torch.
"""

from __future__ import annotations

import argparse
import os

MARKER = "<!-- offrl-cli-reference -->"


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


def on_page_markdown(markdown: str, page, config, files) -> str:
    if MARKER in markdown:
        markdown = markdown.replace(MARKER, cli_reference())
    return markdown
