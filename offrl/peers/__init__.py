"""Drivers that run a peer library on an offrl benchmark cell in a separate Python.

Each driver is a standalone script (it imports neither offrl nor JAX) that reads a request JSON
and prints one JSON object as its last line of stdout; see :mod:`offrl.peers.d3rlpy_driver`.
"""

from __future__ import annotations

from pathlib import Path

#: peer name -> driver script shipped next to this file.
PEERS = {"d3rlpy": "d3rlpy_driver.py"}
#: algorithms each peer's driver can run.
PEER_ALGOS = {"d3rlpy": ("bc", "bcq", "cql", "iql", "td3", "td3_bc", "awac", "rebrac", "crr", "bear", "plas")}


def driver_path(peer: str) -> Path:
    return Path(__file__).with_name(PEERS[peer])
