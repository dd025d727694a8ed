"""Valid values of config fields, one checker, and the command-line flags generated from them.

Every config dataclass of offrl (algorithm configs, the shared :class:`offrl.settings.RunSettings`,
fine-tuning, OPE, behaviour collection, and the language-model trainers of :mod:`offrl.prefs`)
declares each field with :func:`param`, which stores the field's valid values in its
``dataclasses`` metadata::

    expectile: float = param(0.7, Interval(0, 1, "()"))   #: tau of the expectile loss

:func:`check_config` walks the fields and raises :class:`~offrl.errors.ConfigError` with one
sentence naming the field, the value, the valid values and how to set it; a class may add
``ORDERED_FIELDS`` (pairs that must increase) and ``MULTIPLE_OF`` (``(field, of_field)`` pairs).
How a field is set decides the sentence: algorithm configs are set with ``--set FIELD=VALUE``;
a class with ``COMMAND_FLAGS = True`` has one ``--field-name`` flag per field, made by
:func:`add_flags` (type, default, choices and help read from the dataclass and its docstring's
``name: text`` lines) and read back by :func:`from_args`. So a flag never restates a default or
a range, and an out-of-range flag stops with one line and exit code 2.

Pure Python: importing this module imports neither JAX nor torch.

Example::

    @dataclass(frozen=True)
    class Settings:
        \"\"\"steps: gradient steps.\"\"\"
        COMMAND_FLAGS: ClassVar[bool] = True
        steps: int = param(1000, POSITIVE_INT)

        def __post_init__(self):
            check_config(self)

    parser = argparse.ArgumentParser(allow_abbrev=False)
    add_flags(parser, Settings)
    settings = from_args(Settings, parser.parse_args(["--steps", "0"]))   # ConfigError: --steps is 0; ...
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import numbers
import sys
import types
import typing
from typing import Any, Callable, Mapping

from offrl.errors import ConfigError

#: metadata key under which :func:`param` stores a field's valid values.
VALID = "valid"
#: metadata key of a field's flag: a name other than ``--field-name``, or ``False`` for no flag.
FLAG = "flag"
#: metadata key of a field's argparse ``type`` when it is not the annotation's scalar type.
PARSE = "parse"


def _is_real(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _is_int(value) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _fmt(x) -> str:
    if x == math.inf:
        return "inf"
    if x == -math.inf:
        return "-inf"
    return f"{x:g}" if isinstance(x, float) else str(x)


# --------------------------------------------------------------------------- specs
@dataclasses.dataclass(frozen=True)
class Interval:
    """A real (or, with ``integer=True``, an integer) in ``low..high``; ``ends`` is one of
    ``"[]"``, ``"[)"``, ``"(]"``, ``"()"`` (closed or open at each end). NaN and inf are refused."""

    low: float = -math.inf
    high: float = math.inf
    ends: str = "[]"
    integer: bool = False

    def contains(self, value) -> bool:
        if self.integer and not _is_int(value):
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
    """One of a fixed set of values (compared with their type: ``1`` is not ``True``)."""

    values: tuple

    def contains(self, value) -> bool:
        return any(value == v and type(value) is type(v) for v in self.values)

    @property
    def choices(self) -> tuple:
        return self.values

    def __str__(self) -> str:
        return "one of " + ", ".join(repr(v) for v in self.values)


@dataclasses.dataclass(frozen=True)
class Widths:
    """Layer widths: a non-empty tuple of positive integers, e.g. ``(256, 256)``."""

    def contains(self, value) -> bool:
        return isinstance(value, tuple) and len(value) > 0 and all(_is_int(w) and w >= 1 for w in value)

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
class DeviceCount:
    """A positive number of devices, or ``"auto"`` (as many as divide the work)."""

    def contains(self, value) -> bool:
        return value == "auto" or (_is_int(value) and value >= 1)

    def __str__(self) -> str:
        return "a positive integer or 'auto'"


@dataclasses.dataclass(frozen=True)
class OrNone:
    """``None`` (unset) or a value of ``spec``."""

    spec: Any

    def contains(self, value) -> bool:
        return value is None or self.spec.contains(value)

    @property
    def choices(self):
        return getattr(self.spec, "choices", None)

    def __str__(self) -> str:
        return f"None or {self.spec}"


# Specs shared by many fields.
BOOL = OneOf((True, False))
LEARNING_RATE = Interval(0.0, 1.0, "(]")
DISCOUNT = Interval(0.0, 1.0, "[)")
POLYAK = Interval(0.0, 1.0, "(]")
UNIT = Interval(0.0, 1.0, "[]")
POSITIVE = Interval(0.0, math.inf, "()")
NON_NEGATIVE = Interval(0.0, math.inf, "[)")
POSITIVE_INT = Interval(1, math.inf, "[)", integer=True)
NON_NEGATIVE_INT = Interval(0, math.inf, "[)", integer=True)
ANY_INT = Interval(-math.inf, math.inf, "()", integer=True)
ANY_REAL = Interval(-math.inf, math.inf, "()")
WIDTHS = Widths()
REWARD_SCALING = RewardScaling()
DEVICES = DeviceCount()


def param(default=dataclasses.MISSING, valid=None, *, flag: str | bool | None = None,
          parse: Callable[[str], Any] | None = None, default_factory=dataclasses.MISSING):
    """A dataclass field with ``default`` whose valid values are ``valid`` (an object with
    ``contains(value) -> bool`` whose ``str`` reads as a range, e.g. :class:`Interval`).

    ``flag`` names the field's command-line flag when it is not ``--field-name`` (``False``: no
    flag); ``parse`` converts the flag's text when the annotation's type cannot (e.g. ``"auto"``).
    """
    metadata: dict[str, Any] = {}
    if valid is not None:
        metadata[VALID] = valid
    if flag is not None:
        metadata[FLAG] = flag
    if parse is not None:
        metadata[PARSE] = parse
    return dataclasses.field(default=default, default_factory=default_factory, metadata=metadata)


# --------------------------------------------------------------------------- checking
def flag_of(f: dataclasses.Field) -> str:
    """The command-line flag of field ``f``: its declared ``flag`` or ``--field-name``."""
    declared = f.metadata.get(FLAG)
    return declared if isinstance(declared, str) else "--" + f.name.replace("_", "-")


def _shown(value) -> str:
    if isinstance(value, tuple):
        return ",".join(str(v) for v in value)
    return repr(value)


def _example(value) -> str:
    return ",".join(str(v) for v in value) if isinstance(value, tuple) else str(value)


def _default_of(f: dataclasses.Field):
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return None


def _sentence(f: dataclasses.Field, value, spec, owner: str, prefix: str, flags: bool) -> str:
    default = _default_of(f)
    if flags:
        flag = flag_of(f)
        shown_spec = spec.spec if isinstance(spec, OrNone) else spec
        fix = f"e.g. {flag} {_example(default)}" if default is not None else f"or leave {flag} unset"
        return f"{flag} is {_shown(value)}; it must be {shown_spec} ({fix})."
    name = prefix + f.name
    fix = f"e.g. --set {name}={_example(default)}" + ("" if default is not None else ", its default: unset")
    return f"config field '{name}' of {owner} is {_shown(value)}; it must be {spec} ({fix})."


def _field_named(config, name: str) -> dataclasses.Field:
    return next(f for f in dataclasses.fields(config) if f.name == name)


def _name(config, name: str, prefix: str, flags: bool) -> str:
    return flag_of(_field_named(config, name)) if flags else f"'{prefix}{name}'"


def _lead(owner: str, flags: bool) -> str:
    return "" if flags else f"config fields of {owner}: "


def check_config(config, owner: str | None = None, *, flags: bool | None = None, _prefix: str = "") -> None:
    """Raise :class:`ConfigError` for the first field outside its declared valid values.

    The message is one sentence: the field (or its flag), the value, the valid values and an
    example. Fields holding a config dataclass are checked too. A class may also declare
    ``ORDERED_FIELDS = (("low", "high"), ...)``, pairs that must be strictly increasing, and
    ``MULTIPLE_OF = (("field", "of_field"), ...)``: ``field`` a positive multiple of ``of_field``.
    ``flags`` (default: the class's ``COMMAND_FLAGS``) words the sentence for ``--field-name`` flags
    instead of ``--set FIELD=VALUE``.
    """
    owner = owner or type(config).__module__.split(".")[-1]
    cls = type(config)
    flags = getattr(cls, "COMMAND_FLAGS", False) if flags is None else flags
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        spec = f.metadata.get(VALID)
        if spec is not None and not spec.contains(value):
            raise ConfigError(_sentence(f, value, spec, owner, _prefix, flags))
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            check_config(value, owner, _prefix=f"{_prefix}{f.name}.")
    for low, high in getattr(cls, "ORDERED_FIELDS", ()):
        if not getattr(config, low) < getattr(config, high):
            example = _example(_default_of(_field_named(config, low)))
            how = (f"{flag_of(_field_named(config, low))} {example}" if flags
                   else f"--set {_prefix}{low}={example}")
            raise ConfigError(f"{_lead(owner, flags)}{_name(config, low, _prefix, flags)} ({getattr(config, low)!r}) must be below "
                              f"{_name(config, high, _prefix, flags)} ({getattr(config, high)!r}); set e.g. {how}.")
    for name, of in getattr(cls, "MULTIPLE_OF", ()):
        value, base = getattr(config, name), getattr(config, of)
        if not (_is_int(value) and value >= 1 and value % base == 0):
            raise ConfigError(f"{_lead(owner, flags)}{_name(config, name, _prefix, flags)} is {value!r}; it must be a positive "
                              f"multiple of {_name(config, of, _prefix, flags)} ({base}).")


# --------------------------------------------------------------------------- documentation
def field_docs(cls) -> dict[str, str]:
    """``name: text`` lines of the class docstrings along the MRO (``a / b: text`` documents both;
    continuation lines, indented further, are joined)."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        current = None
        for line in (klass.__doc__ or "").splitlines():
            stripped = line.strip()
            head, sep, rest = stripped.partition(":")
            names = [n.strip() for n in head.split("/")]
            if sep and names and all(n.isidentifier() for n in names) and line.startswith("    ") and not line.startswith("      "):
                current = names
                for n in names:
                    docs[n] = rest.strip()
            elif current and stripped and line.startswith("      "):
                for n in current:
                    docs[n] += " " + stripped
            else:
                current = None
    return docs


def _type_hints(cls) -> dict[str, Any]:
    """Field annotations resolved where possible (a name that cannot be resolved stays a string)."""
    hints: dict[str, Any] = {}
    for klass in reversed(cls.__mro__):
        namespace = vars(sys.modules.get(klass.__module__, object()))
        for name, hint in vars(klass).get("__annotations__", {}).items():
            if isinstance(hint, str):
                try:
                    hint = eval(hint, dict(namespace), {})  # noqa: S307 - an annotation of our own class
                except Exception:  # noqa: BLE001 - e.g. a name imported lazily: no flag for it
                    pass
            hints[name] = hint
    return hints


def _scalar(hint) -> type | None:
    """The flag type of an annotation such as ``int``, ``float | None`` (``None`` if not a scalar)."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        return args[0] if args[0] in (int, float, str, bool) else None
    return hint if hint in (int, float, str, bool) else None


def flag_fields(cls, only=None, skip=()) -> list[dataclasses.Field]:
    """The fields of ``cls`` that :func:`add_flags` turns into flags (``only`` / ``skip`` by name)."""
    hints = _type_hints(cls)
    chosen = []
    for f in dataclasses.fields(cls):
        if f.name in skip or (only is not None and f.name not in only) or f.metadata.get(FLAG) is False:
            continue
        if _scalar(hints.get(f.name)) is None and PARSE not in f.metadata:
            continue
        chosen.append(f)
    return chosen


def add_flags(parser: argparse.ArgumentParser, cls, *, prefix: str = "cfg", only=None, skip=(),
              defaults: Mapping[str, Any] | None = None, shown: Mapping[str, str] | None = None,
              labels: Mapping[str, type] | None = None) -> None:
    """One flag per scalar field of ``cls`` (minus ``skip``, or only ``only``): the field's type,
    default, choices and the ``name: text`` help of its docstring; ``dest`` is ``PREFIX__name``.

    ``defaults`` overrides a default for this command only (``None``: unset, then ``shown[name]``
    says in the help what unset means). ``labels`` (``{"SAC": A, "DQN": B}``, ``cls`` among them)
    makes one set of flags for several configs: every flag is unset by default, its help gives
    each config's default, and :func:`from_args` passes only the flags given.
    """
    classes = dict(labels) if labels else {"": cls}
    fields: dict[str, tuple[dataclasses.Field, type]] = {}
    for klass in classes.values():
        for f in flag_fields(klass, only, skip):
            fields.setdefault(f.name, (f, klass))
    defaults, shown = dict(defaults or {}), dict(shown or {})
    for name, (f, klass) in fields.items():
        hints, docs = _type_hints(klass), field_docs(klass)
        typ = _scalar(hints.get(name))
        spec = f.metadata.get(VALID)
        help_text = docs.get(name, "").rstrip(".")
        kwargs: dict[str, Any] = {"dest": f"{prefix}__{name}"}
        if labels:
            kwargs["default"] = argparse.SUPPRESS
            each = {label: _default_of(g) for label, k in classes.items() for g in dataclasses.fields(k) if g.name == name}
            notes = [] if len(each) == len(classes) else [f"{'/'.join(each)} only"]
            known = {label: v for label, v in each.items() if v is not None}
            if known and len(set(map(_example, known.values()))) == 1 and len(known) == len(classes):
                notes.append(f"default {_example(next(iter(known.values())))}")
            elif known:
                notes.append("default " + ", ".join(f"{label} {_example(v)}" for label, v in known.items()))
            help_text += f" ({'; '.join(notes)})" if notes else ""
        else:
            default = defaults.get(name, _default_of(f))
            kwargs["default"] = default
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING and name not in defaults:
                kwargs["required"] = True
            elif typ is not bool:
                if default is not None:
                    help_text += f" (default {_example(default)})"
                elif name in shown:
                    help_text += f" (default: {shown[name]})"
        if typ is bool and PARSE not in f.metadata:
            kwargs["action"] = argparse.BooleanOptionalAction
        else:
            kwargs["type"] = f.metadata.get(PARSE, typ)
            choices = getattr(spec, "choices", None)
            if choices:
                kwargs["choices"] = choices
            else:
                kwargs["metavar"] = flag_of(f).lstrip("-").replace("-", "_").upper()
        parser.add_argument(flag_of(f), help=help_text.replace("%", "%%"), **kwargs)


def flag_values(cls, args: argparse.Namespace, prefix: str = "cfg") -> dict[str, Any]:
    """``{field: value}`` of the ``PREFIX__*`` flags of ``args`` that are fields of ``cls``."""
    names = {f.name for f in dataclasses.fields(cls)}
    head = f"{prefix}__"
    return {k[len(head):]: v for k, v in vars(args).items() if k.startswith(head) and k[len(head):] in names}


def from_args(cls, args: argparse.Namespace, prefix: str = "cfg", **fixed):
    """Build ``cls`` from the ``PREFIX__*`` values of ``args`` plus ``fixed`` fields, checked by :func:`check_config`."""
    config = cls(**{**flag_values(cls, args, prefix), **fixed})
    check_config(config)
    return config


def no_abbreviations(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Turn argparse's prefix matching off for ``parser`` and every subparser below it
    (``--config.expectil`` must not mean ``--config.expectile``)."""
    parser.allow_abbrev = False
    for action in parser._actions:  # noqa: SLF001 - argparse keeps subparsers here
        if isinstance(action, argparse._SubParsersAction):  # noqa: SLF001
            for child in action.choices.values():
                no_abbreviations(child)
    return parser


__all__ = ["ANY_INT", "ANY_REAL", "BOOL", "DEVICES", "DISCOUNT", "DeviceCount", "FLAG", "Interval", "LEARNING_RATE",
           "NON_NEGATIVE", "NON_NEGATIVE_INT", "OneOf", "OrNone", "PARSE", "POLYAK", "POSITIVE", "POSITIVE_INT",
           "REWARD_SCALING", "RewardScaling", "UNIT", "VALID", "WIDTHS", "Widths", "add_flags", "check_config",
           "field_docs", "flag_fields", "flag_of", "flag_values", "from_args", "no_abbreviations", "param"]
