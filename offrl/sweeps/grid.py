"""Sweep grids: ``--grid FIELD=V1,V2,...`` parsed against an algorithm's Config, split into programs.

A configuration is one point of the Cartesian product of the grid. Fields listed in the
algorithm's ``SPEC.traced_fields`` (read by ``update`` through
:func:`offrl.algos.common.hyperparameter`) become traced per-member values, so every
configuration that differs only in them trains in ONE vmapped, compiled program (a traced
learning rate scales the optimiser's step: :func:`offrl.algos.common.learning_rate_scale`).
Any other field (network widths, batch size, anything read when the agent is built) is fixed
when a program compiles: configurations differing in it train as separate programs.

Example::

    grid = parse_grid(iql.Config, ["expectile=0.6,0.7", "awr_inverse_temperature=1,3"])
    plan = plan_programs(iql.Config, grid)   # one program of 4 configurations
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from offrl.errors import ConfigError


def _split_values(text: str) -> list[str]:
    """``"0.6,0.7"`` -> two values; values of tuple fields are separated by ``;`` (``64,64;256,256``)."""
    sep = ";" if ";" in text else ","
    return [v.strip() for v in text.split(sep) if v.strip()]


def parse_grid(config_cls, items: Sequence[str], base: Mapping[str, Any] | None = None) -> dict[str, list]:
    """``{field: [converted values]}`` from ``["field=v1,v2", ...]`` (old field names accepted).

    Each value is converted and range-checked as ``--set field=value`` would be (on top of
    ``base`` overrides); a malformed item, unknown field, repeated field or bad value raises
    :class:`ConfigError` naming the ``--grid`` item.
    """
    import dataclasses

    from offrl.algos.common import apply_overrides, renamed_field

    names = {f.name for f in dataclasses.fields(config_cls)}
    grid: dict[str, list] = {}
    base_config = apply_overrides(config_cls(), dict(base or {}))
    for item in items:
        if "=" not in item:
            raise ConfigError(f"--grid {item!r} is not of the form FIELD=V1,V2,...; e.g. --grid expectile=0.7,0.9.")
        raw_name, text = item.split("=", 1)
        name = renamed_field(config_cls, raw_name.strip().replace("-", "_"))
        if name not in names:
            raise ConfigError(f"--grid {raw_name.strip()}: not a config field of {config_cls.__module__.split('.')[-1]}; valid fields: {', '.join(sorted(names))}.")
        if name in grid:
            raise ConfigError(f"--grid {name} is given twice; list all its values in one --grid {name}=V1,V2,...")
        values = _split_values(text)
        if not values:
            raise ConfigError(f"--grid {item!r} has no values; e.g. --grid {name}=0.7,0.9.")
        converted = []
        for value in values:
            try:
                converted.append(getattr(apply_overrides(base_config, {name: value}), name))
            except ConfigError as exc:
                raise ConfigError(f"--grid {name}: value {value!r} is not valid ({exc})") from None
        if len(set(converted)) != len(converted):
            raise ConfigError(f"--grid {name} lists the same value twice ({text}); give each value once.")
        grid[name] = converted
    return grid


def configurations(grid: Mapping[str, Sequence]) -> list[dict]:
    """Every point of the grid, the last field varying fastest."""
    fields = list(grid)
    return [dict(zip(fields, combo)) for combo in itertools.product(*(grid[f] for f in fields))]


@dataclass(frozen=True)
class Program:
    """One compiled program: its fixed fields and the configurations (traced values) it trains."""

    static: dict
    members: list  # list[dict]: the full grid point of each configuration, in grid order


@dataclass(frozen=True)
class Plan:
    traced: tuple[str, ...]
    static: tuple[str, ...]
    programs: tuple[Program, ...]

    def describe(self) -> str:
        """One line: what is traced and how many programs compile."""
        n = sum(len(p.members) for p in self.programs)
        traced = ", ".join(self.traced) or "nothing"
        if not self.static:
            return f"{n} configurations in 1 vmapped program (traced: {traced})."
        return (f"{', '.join(self.static)} fixed when a program compiles (array shapes or build-time settings): "
                f"{n} configurations train as {len(self.programs)} separate programs (traced within each: {traced}).")


def plan_programs(config_cls, grid: Mapping[str, Sequence], traced: Sequence[str] | None = None) -> Plan:
    """Split the grid's configurations into programs.

    ``traced=None`` traces every grid field the algorithm can trace; an explicit ``traced``
    list naming a field the algorithm cannot trace raises :class:`ConfigError`.
    """
    from offrl.algos.common import renamed_field, traceable_fields

    traceable = traceable_fields(config_cls)
    algo = config_cls.__module__.split(".")[-1]
    def numeric(name):
        return all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in grid[name])

    if traced is None:
        traced_fields = tuple(f for f in grid if f in traceable and numeric(f))
    else:
        traced_fields = tuple(renamed_field(config_cls, f.strip().replace("-", "_")) for f in traced if f.strip())
        for name in traced_fields:
            if name not in traceable:
                raise ConfigError(
                    f"--traced {name}: {algo} cannot trace this field (it changes array shapes or is fixed when the program "
                    f"compiles); traceable fields: {', '.join(traceable) or 'none'}. Drop it from --traced to train its values as separate programs.")
            if name not in grid:
                raise ConfigError(f"--traced {name} is not a --grid field; add --grid {name}=V1,V2,... or drop it from --traced.")
            if not numeric(name):
                raise ConfigError(f"--traced {name}: only numbers can be traced, but its values are {grid[name]}; drop the non-numeric values or drop it from --traced.")
    static_fields = tuple(f for f in grid if f not in traced_fields)
    groups: dict[tuple, list] = {}
    for point in configurations(grid):
        groups.setdefault(tuple(point[f] for f in static_fields), []).append(point)
    programs = tuple(Program(dict(zip(static_fields, key)), members) for key, members in groups.items())
    return Plan(traced_fields, static_fields, programs)


def folder_name(point: Mapping[str, Any]) -> str:
    """A run-folder name for a configuration: ``expectile=0.7_awr_inverse_temperature=3``."""
    def text(v):
        return "x".join(str(x) for x in v) if isinstance(v, tuple) else str(v)
    return "_".join(f"{k}={text(v)}" for k, v in point.items()) or "base"
