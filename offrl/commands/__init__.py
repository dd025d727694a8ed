"""One module per ``offrl`` command; each exposes ``register(subparsers)`` (see offrl.cli)."""
