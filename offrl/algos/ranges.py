"""Valid values of config fields, declared next to each field and checked in one place.

An algorithm's ``Config`` declares each field with :func:`param`, which stores the field's
valid range or set in its ``dataclasses`` metadata::

    expectile: float = param(0.7, Interval(0, 1, "()"))   #: tau of the expectile loss

:func:`check_config` walks every field of a config and raises :class:`~offrl.errors.ConfigError`
with one sentence naming the field, the value and the valid range. It runs whenever a config is
built from user input (:func:`offrl.algos.common.apply_overrides`,
:func:`offrl.algos.common.config_from_dict`), so ``offrl train --set expectile=1.5`` stops
before any data is loaded. Pure Python: importing this module does not import JAX.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from typing import Any

from offrl.errors import ConfigError

#: metadata key under which :func:`param` stores a field's valid values.
VALID = "valid"


def _is_real(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _fmt(x) -> str:
    if x == math.inf:
        return "inf"
    if x == -math.inf:
        return "-inf"
    return f"{x:g}" if isinstance(x, float) else str(x)


@dataclasses.dataclass(frozen=True)
class Interval:
    """A real (or, with ``integer=True``, an integer) in ``low..high``; ``ends`` is one of
    ``"[]"``, ``"[)"``, ``"(]"``, ``"()"`` (closed or open at each end)."""

    low: float = -math.inf
    high: float = math.inf
    ends: str = "[]"
    integer: bool = False

    def contains(self, value) -> bool:
        if self.integer and not (isinstance(value, numbers.Integral) and not isinstance(value, bool)):
            return False
        if not _is_real(value) or not math.isfinite(value):
            return False
        above = value >= self.low if self.ends[0] == "[" else value > self.low
        below = value <= self.high if self.ends[1] == "]" else value < self.high
        return above and below

    def __str__(self) -> str:
        kind = "an integer" if self.integer else "a number"
        if self.high == math.inf:
            op = ">=" if self.ends[0] == "[" else ">"
            return f"{kind} {op} {_fmt(self.low)}"
        if self.low == -math.inf:
            op = "<=" if self.ends[1] == "]" else "<"
            return f"{kind} {op} {_fmt(self.high)}"
        return f"{kind} in {self.ends[0]}{_fmt(self.low)}, {_fmt(self.high)}{self.ends[1]}"


@dataclasses.dataclass(frozen=True)
class OneOf:
    """One of a fixed set of values (strings are compared case-sensitively)."""

    values: tuple

    def contains(self, value) -> bool:
        return any(value == v and type(value) is type(v) for v in self.values)

    def __str__(self) -> str:
        return "one of " + ", ".join(repr(v) for v in self.values)


@dataclasses.dataclass(frozen=True)
class Widths:
    """Layer widths: a non-empty tuple of positive integers, e.g. ``(256, 256)``."""

    def contains(self, value) -> bool:
        return (isinstance(value, tuple) and len(value) > 0
                and all(isinstance(w, numbers.Integral) and not isinstance(w, bool) and w >= 1 for w in value))

    def __str__(self) -> str:
        return "one or more positive integer layer widths, e.g. 256,256"


@dataclasses.dataclass(frozen=True)
class RewardScaling:
    """``"none"``, ``"returns"`` or a positive number written as a string (e.g. ``"0.1"``)."""

    def contains(self, value) -> bool:
        if not isinstance(value, str):
            return False
        if value.lower() in ("none", "returns"):
            return True
        try:
            number = float(value)
        except ValueError:
            return False
        return math.isfinite(number) and number > 0

    def __str__(self) -> str:
        return "'none', 'returns' or a positive number such as '0.1'"


@dataclasses.dataclass(frozen=True)
class OrNone:
    """``None`` or a value of ``spec``."""

    spec: Any

    def contains(self, value) -> bool:
        return value is None or self.spec.contains(value)

    def __str__(self) -> str:
        return f"None or {self.spec}"


# Specs shared by many fields.
BOOL = OneOf((True, False))
LEARNING_RATE = Interval(0.0, 1.0, "(]")
DISCOUNT = Interval(0.0, 1.0, "[)")
POLYAK = Interval(0.0, 1.0, "(]")
POSITIVE = Interval(0.0, math.inf, "()")
NON_NEGATIVE = Interval(0.0, math.inf, "[)")
POSITIVE_INT = Interval(1, math.inf, "[)", integer=True)
NON_NEGATIVE_INT = Interval(0, math.inf, "[)", integer=True)
ANY_REAL = Interval(-math.inf, math.inf, "()")
WIDTHS = Widths()
REWARD_SCALING = RewardScaling()


def param(default, valid):
    """A dataclass field with ``default`` whose valid values are ``valid`` (an object with
    ``contains(value) -> bool`` and a ``str`` that reads as a range, e.g. :class:`Interval`)."""
    return dataclasses.field(default=default, metadata={VALID: valid})


def valid_values(config_cls, name: str):
    """The valid-values spec of field ``name`` (``None`` when the field declares none)."""
    for f in dataclasses.fields(config_cls):
        if f.name == name:
            return f.metadata.get(VALID)
    raise KeyError(name)


def check_config(config, owner: str | None = None) -> None:
    """Raise :class:`ConfigError` for the first field outside its declared range or set.

    The message names the field, the value, the valid values and how to set it, in one line.
    A config class may also list ``ORDERED_FIELDS = (("low_field", "high_field"), ...)``
    (a ``ClassVar``): pairs whose values must be strictly increasing.
    """
    owner = owner or type(config).__module__.split(".")[-1]
    for f in dataclasses.fields(config):
        spec = f.metadata.get(VALID)
        if spec is None:
            continue
        value = getattr(config, f.name)
        if not spec.contains(value):
            shown = ",".join(str(v) for v in value) if isinstance(value, tuple) else repr(value)
            raise ConfigError(f"config field '{f.name}' of {owner} is {shown}; it must be {spec} "
                              f"(e.g. --set {f.name}={_example(f.default)}).")
    for low, high in getattr(type(config), "ORDERED_FIELDS", ()):
        if not getattr(config, low) < getattr(config, high):
            raise ConfigError(f"config fields of {owner}: '{low}' ({getattr(config, low)!r}) must be below "
                              f"'{high}' ({getattr(config, high)!r}); set e.g. --set {low}={_example(valid_default(config, low))}.")


def valid_default(config, name: str):
    return next(f.default for f in dataclasses.fields(config) if f.name == name)


def _example(default) -> str:
    if isinstance(default, tuple):
        return ",".join(str(v) for v in default)
    return str(default)
