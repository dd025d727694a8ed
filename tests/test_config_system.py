"""One valid-values vocabulary and checker (offrl.config), the flags generated from it, one TIERS,
no abbreviated flags, and ``offrl --help`` without JAX."""

import argparse
import dataclasses
import inspect
import math
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import pytest

from offrl.cli import build_parser, main, split_config_flags
from offrl.config import (POSITIVE_INT, UNIT, Interval, OneOf, OrNone, VALID, add_flags, check_config, flag_of,
                          from_args, param)
from offrl.errors import ConfigError
from offrl.settings import RunSettings


@dataclass(frozen=True)
class Inner:
    """inner_steps: steps of the inner loop."""

    COMMAND_FLAGS: ClassVar[bool] = True
    inner_steps: int = param(5, POSITIVE_INT, flag="--inner")


@dataclass(frozen=True)
class Toy:
    """A toy config.

    rate: a share, in [0, 1].
    mode: fast or slow.
    every: steps between two things.
    chunk: steps per chunk.
    limit: optional cap.
    low / high: a range.
    """

    rate: float = param(0.5, UNIT)
    mode: str = param("fast", OneOf(("fast", "slow")))
    every: int = param(10, POSITIVE_INT)
    chunk: int = param(5, POSITIVE_INT)
    limit: int | None = param(None, OrNone(POSITIVE_INT))
    low: float = param(0.0, Interval())
    high: float = param(1.0, Interval())
    inner: Inner = dataclasses.field(default_factory=Inner)

    ORDERED_FIELDS: ClassVar = (("low", "high"),)
    MULTIPLE_OF: ClassVar = (("every", "chunk"),)


@dataclass(frozen=True)
class ToyFlags(Toy):
    COMMAND_FLAGS: ClassVar[bool] = True


def _error(fn) -> str:
    with pytest.raises(ConfigError) as info:
        fn()
    message = str(info.value)
    assert "\n" not in message
    return message


def test_one_checker_words_set_fields_and_flags_differently_but_checks_the_same_rules():
    check_config(Toy())
    assert _error(lambda: check_config(Toy(rate=1.5), owner="toy")) == (
        "config field 'rate' of toy is 1.5; it must be a number in [0, 1] (e.g. --set rate=0.5).")
    assert _error(lambda: check_config(ToyFlags(rate=1.5))) == "--rate is 1.5; it must be a number in [0, 1] (e.g. --rate 0.5)."
    assert _error(lambda: check_config(ToyFlags(mode="medium"))) == (
        "--mode is 'medium'; it must be one of 'fast', 'slow' (e.g. --mode fast).")
    assert _error(lambda: check_config(ToyFlags(limit=0))) == "--limit is 0; it must be an integer >= 1 (or leave --limit unset)."
    assert _error(lambda: check_config(ToyFlags(low=2.0))) == "--low (2.0) must be below --high (1.0); set e.g. --low 0.0."
    assert _error(lambda: check_config(Toy(low=2.0), owner="toy")).startswith("config fields of toy: 'low' (2.0) must be below 'high'")
    assert _error(lambda: check_config(ToyFlags(every=12))) == "--every is 12; it must be a positive multiple of --chunk (5)."
    check_config(ToyFlags(every=15))
    # a nested config is checked with its own wording
    assert _error(lambda: check_config(Toy(inner=Inner(inner_steps=0)))) == "--inner is 0; it must be an integer >= 1 (e.g. --inner 5)."


def test_integers_nan_and_bools_are_refused_where_they_do_not_belong():
    assert not POSITIVE_INT.contains(2.0) and not POSITIVE_INT.contains(True) and POSITIVE_INT.contains(3)
    assert not UNIT.contains(math.nan) and UNIT.contains(0) and UNIT.contains(1.0)
    assert not OneOf((1, 2)).contains(True)


def _parser(cls, **kwargs):
    parser = argparse.ArgumentParser(allow_abbrev=False)
    add_flags(parser, cls, **kwargs)
    return parser


def test_flags_carry_the_fields_type_default_choices_and_help():
    parser = _parser(ToyFlags, prefix="toy")
    args = parser.parse_args([])
    assert from_args(ToyFlags, args, prefix="toy") == ToyFlags()
    args = parser.parse_args(["--rate", "0.25", "--mode", "slow", "--limit", "3"])
    assert from_args(ToyFlags, args, prefix="toy") == ToyFlags(rate=0.25, mode="slow", limit=3)
    with pytest.raises(SystemExit):
        parser.parse_args(["--mode", "medium"])           # choices come from the OneOf
    with pytest.raises(ConfigError, match="--rate is 2.0"):
        from_args(ToyFlags, parser.parse_args(["--rate", "2"]), prefix="toy")
    help_text = parser.format_help()
    assert "a share, in [0, 1] (default 0.5)" in help_text and "--inner" not in help_text   # nested: no flag
    assert "--low" in help_text and "--high" in help_text       # "low / high:" documents both


def test_only_skip_defaults_and_required_fields():
    @dataclass(frozen=True)
    class Req:
        """path: where. n: how many."""

        COMMAND_FLAGS: ClassVar[bool] = True
        path: str
        n: int = param(3, POSITIVE_INT)

    parser = _parser(Req, defaults={"n": 7})
    with pytest.raises(SystemExit):
        parser.parse_args([])
    assert from_args(Req, parser.parse_args(["--path", "p"])) == Req("p", 7)
    parser = _parser(ToyFlags, only=("rate",))
    assert {a.dest for a in parser._actions} == {"help", "cfg__rate"}


def test_labels_make_one_flag_set_for_two_configs_with_each_default_in_the_help():
    from offrl.collect.discrete import DQNBehaviorConfig
    from offrl.collect.train import TrainBehaviorConfig

    parser = _parser(TrainBehaviorConfig, labels={"SAC": TrainBehaviorConfig, "DQN": DQNBehaviorConfig})
    text = " ".join(parser.format_help().split())
    assert "(default SAC 300000, DQN 50000)" in text and "(DQN only; default DQN 0.1)" in text
    assert vars(parser.parse_args([])) == {}     # nothing given: each config keeps its own defaults


def test_collect_flags_take_each_learners_defaults_and_refuse_the_other_learners_flags(capsys):
    from offrl.collect.discrete import DQNBehaviorConfig
    from offrl.collect.train import TrainBehaviorConfig
    from offrl.commands.collect import behavior_config

    sub = _subcommand("collect", "train-behavior")
    args = sub.parse_args(["--env", "Pendulum-v1", "--out", "z"])
    assert behavior_config(TrainBehaviorConfig, args) == TrainBehaviorConfig()
    assert behavior_config(DQNBehaviorConfig, args) == DQNBehaviorConfig()
    # derived defaults, by hand: start_steps min(10000, 20000 // 10) = 2000, snapshot_every 20000 // 30 = 666
    sac = behavior_config(TrainBehaviorConfig, sub.parse_args(["--env", "Pendulum-v1", "--out", "z", "--steps", "20000"]))
    assert (sac.start_steps, sac.snapshot_every) == (2000, 666)
    dqn = behavior_config(DQNBehaviorConfig, sub.parse_args(["--env", "CartPole-v1", "--out", "z", "--steps", "20000"]))
    assert (dqn.start_steps, dqn.snapshot_every, dqn.update_every) == (1000, 1000, 10)
    with pytest.raises(ConfigError, match="--epsilon applies to discrete"):
        behavior_config(TrainBehaviorConfig, sub.parse_args(["--env", "Pendulum-v1", "--out", "z", "--epsilon", "0.2"]))


def _subcommand(*names):
    parser = build_parser()
    for name in names:
        parser = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[name]
    return parser


def _all_parsers(parser):
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                yield from _all_parsers(child)


def test_no_parser_accepts_abbreviations(capsys):
    parsers = list(_all_parsers(build_parser()))
    assert len(parsers) > 20 and all(p.allow_abbrev is False for p in parsers)
    with pytest.raises(SystemExit) as exc:
        main(["train", "--dataset", "x", "--eval-ever", "5"])
    assert exc.value.code == 2 and "unrecognized arguments: --eval-ever 5" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["ope", "p", "--dataset", "x", "--fqe-step", "5"])


def test_a_config_flag_prefix_is_refused_not_read_as_the_field(capsys):
    assert main(["train", "--algo", "iql", "--dataset", "unused.npz", "--config.expectil", "0.8"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--config.expectil: unknown config field 'expectil' for iql" in err
    assert main(["train", "--algo", "iql", "--dataset", "unused.npz", "--config.expectile"]) == 2
    assert "--config.expectile needs a value, e.g. --config.expectile 0.7" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["sweep", "--dataset", "x", "--config.expectile", "0.8"])


def test_config_flag_pairs_are_split_from_the_command_line():
    rest, pairs = split_config_flags(["train", "--config.a", "-1", "--steps", "3", "--config.b=x,y", "--config.c", "--seed", "1"])
    assert rest == ["train", "--steps", "3", "--seed", "1"]
    assert pairs == [("--config.a", "-1"), ("--config.b", "x,y"), ("--config.c", None)]


def test_help_lists_the_registry_and_imports_no_algorithm_nor_jax():
    script = ("import sys\n"
              "import offrl.cli\n"
              "text = offrl.cli.build_parser().format_help()\n"
              "for name in ('train', 'sweep', 'ope', 'finetune', 'collect', 'benchmark', 'prefs'):\n"
              "    assert name in text, name\n"
              "bad = sorted(m for m in sys.modules if m in ('jax', 'torch', 'flax') or m.startswith('offrl.algos.'))\n"
              "assert not bad, bad\n"
              "print('ok')\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=Path(__file__).parents[1])
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
    from offrl.algos import ALGORITHM_NAMES

    train_help = " ".join(_subcommand("train").format_help().split())
    assert ", ".join(ALGORITHM_NAMES) in train_help


def test_list_fields_prints_the_algorithms_fields_with_ranges(capsys):
    from offrl.algos import td3_bc

    assert main(["train", "--algo", "td3_bc", "--list-fields"]) == 0
    out = capsys.readouterr().out
    for f in dataclasses.fields(td3_bc.Config):
        assert f.name in out
    assert str(next(f for f in dataclasses.fields(td3_bc.Config) if f.name == "discount").metadata[VALID]) in out


def test_run_settings_defaults_are_the_engine_and_sweep_defaults():
    from offrl.engine.training import train
    from offrl.sweeps.local import sweep

    parameters = inspect.signature(train).parameters
    for f in dataclasses.fields(RunSettings):
        assert parameters[f.name].default == f.default, f.name
    args = _subcommand("train").parse_args([])
    assert from_args(RunSettings, args, prefix="run") == RunSettings()
    sweep_parameters = inspect.signature(sweep).parameters
    args = _subcommand("sweep").parse_args(["--dataset", "x"])
    for name in ("steps", "seeds", "seed", "eval_every", "eval_episodes", "log_every", "devices", "progress"):
        assert getattr(args, f"run__{name}") == sweep_parameters[name].default, name


def test_finetune_and_ope_flags_default_to_their_configs():
    from offrl.finetuning import FinetuneConfig
    from offrl.ope.behavior import BehaviorConfig
    from offrl.ope.config import OPEConfig

    args = _subcommand("finetune").parse_args(["run"])
    assert from_args(FinetuneConfig, args) == FinetuneConfig()
    assert args.cfg__bc_anneal_steps == 0 and "--bc-anneal" in _subcommand("finetune").format_help()
    args = _subcommand("ope").parse_args(["p", "--dataset", "d"])
    built = from_args(OPEConfig, args, prefix="ope", behavior_cloning=from_args(BehaviorConfig, args, prefix="bc"))
    assert dataclasses.replace(built, fqe=OPEConfig().fqe) == OPEConfig()


def _bad_value(spec):
    spec = spec.spec if isinstance(spec, OrNone) else spec
    if not isinstance(spec, Interval):
        return None
    if math.isfinite(spec.low):
        value = spec.low if spec.ends[0] == "(" else spec.low - 1
    elif math.isfinite(spec.high):
        value = spec.high if spec.ends[1] == ")" else spec.high + 1
    else:
        return None
    return str(int(value)) if spec.integer else str(value)


def _range_cases():
    from offrl.collect.train import TrainBehaviorConfig
    from offrl.finetuning import FinetuneConfig
    from offrl.ope.behavior import BehaviorConfig
    from offrl.ope.config import OPEConfig

    commands = [(["train", "--dataset", "unused.npz"], RunSettings, ("devices",)),
                (["sweep", "--dataset", "unused.npz"], RunSettings, ("devices", "resume", "tensorboard", "wandb", "keep_checkpoints")),
                (["finetune", "no-such-run"], FinetuneConfig, ()),
                (["ope", "no-such-policy", "--dataset", "unused.npz"], OPEConfig, ()),
                (["select", "no-such-policy", "--dataset", "unused.npz"], BehaviorConfig, ()),
                (["collect", "train-behavior", "--env", "Pendulum-v1", "--out", "{tmp}/zoo"], TrainBehaviorConfig, ()),
                (["benchmark", "--envs", "pendulum", "--tiers", "medium", "--algos", "bc", "--out", "{tmp}/bench"], RunSettings, ())]
    for argv, cls, skip in commands:
        flags = {o for a in _subcommand(*argv[:2] if argv[0] == "collect" else argv[:1])._actions for o in a.option_strings}
        for f in dataclasses.fields(cls):
            bad = _bad_value(f.metadata.get(VALID)) if flag_of(f) in flags and f.name not in skip else None
            if bad is not None:
                yield pytest.param(argv, flag_of(f), bad, id=f"{argv[0]}{flag_of(f)}")


@pytest.mark.parametrize("argv,flag,bad", list(_range_cases()))
def test_every_generated_flag_is_range_checked_in_one_line_with_exit_2(argv, flag, bad, capsys, tmp_path):
    assert main([a.format(tmp=tmp_path) for a in argv] + [flag, bad]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and re.search(rf"{re.escape(flag)} (is|\().*(must be|multiple)", err), err
    assert not any(tmp_path.iterdir())   # nothing written


def test_one_tiers_tuple():
    from offrl import benchmark
    from offrl.collect import tiers
    from offrl.data.doctor import tier

    assert tiers.TIERS is tier.TIERS and benchmark.TIERS is tier.TIERS
    definitions = [p for p in Path(tier.__file__).parents[2].rglob("*.py") if re.search(r"^TIERS\s*=", p.read_text(), re.M)]
    assert [p.name for p in definitions] == ["tier.py"]
    choices = next(a for a in _subcommand("collect", "dataset")._actions if a.dest == "tier").choices
    assert tuple(choices) == tier.TIERS
