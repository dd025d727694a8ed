"""The `offrl prefs` flags are generated from the config dataclasses: same defaults, every field
documented, bad values refused in one sentence with exit code 2."""

import dataclasses

import pytest

from offrl.prefs import config as C


def _subparser(command):
    from offrl.cli import build_parser

    parser = build_parser()
    prefs = parser._subparsers._group_actions[0].choices["prefs"]
    return prefs._subparsers._group_actions[0].choices[command]


@pytest.mark.parametrize("command", ["sft", "rm", "dpo", "ipo", "kto", "simpo", "cpo", "orpo"])
def test_flags_carry_the_dataclass_defaults(command):
    from offrl.commands.prefs import TRAINERS

    cls_name, skip = TRAINERS[command]
    cls = getattr(C, cls_name)
    parser = _subparser(command)
    args = parser.parse_args(["--model", "m", "--data", "d", "--out", "o"])
    defaults = cls()
    flags = {k[len("cfg__"):] for k in vars(args) if k.startswith("cfg__")}
    assert flags == {f.name for f in dataclasses.fields(cls)} - set(skip)
    for name in flags:
        assert getattr(args, f"cfg__{name}") == getattr(defaults, name), name
    built = C.config_from_args(cls, args)
    assert dataclasses.replace(built) == built


def test_every_config_field_is_documented():
    for cls in (C.SFTConfig, C.RewardModelConfig, C.PreferenceConfig, C.SimPOConfig):
        docs = C.field_docs(cls)
        missing = [f.name for f in dataclasses.fields(cls) if not docs.get(f.name)]
        assert not missing, (cls.__name__, missing)
    assert "bootstrap" in C.field_docs(C.RewardModelConfig)["heads"]  # continuation lines are joined


def test_bad_values_raise_one_sentence():
    from offrl.errors import ConfigError

    with pytest.raises(ConfigError, match=r"^--beta is -1.0; it must be a number > 0 \(e.g. --beta 0.1\)\.$"):
        C.PreferenceConfig(beta=-1.0)
    with pytest.raises(ConfigError, match=r"--eval-fraction is 1.0; it must be a number in \[0, 1\)"):
        C.SFTConfig(eval_fraction=1.0)
    with pytest.raises(ConfigError, match="--loss is 'nope'; it must be one of 'dpo', 'ipo'"):
        C.PreferenceConfig(loss="nope")
    with pytest.raises(ConfigError, match=r"--kl-target is 0.0; it must be a number > 0 \(or leave --kl-target unset\)"):
        C.PPOConfig(kl_target=0.0)
    with pytest.raises(ConfigError, match="--steps is 2.5; it must be an integer >= 1"):
        C.SFTConfig(steps=2.5)
    C.PreferenceConfig(loss="rdpo", label_smoothing=0.2)  # in range


def test_cli_bad_flag_value_exits_2_with_one_line(tmp_path, capsys):
    from offrl.cli import main

    code = main(["prefs", "dpo", "--model", str(tmp_path), "--data", "x.jsonl", "--out", str(tmp_path / "o"),
                 "--beta", "0"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "--beta is 0.0; it must be a number > 0" in err[0]
    assert not (tmp_path / "o").exists()
    code = main(["prefs", "dpo", "--model", str(tmp_path), "--data", "x.jsonl", "--out", str(tmp_path / "o"),
                 "--robust"])
    assert code == 2 and "--robust needs --label-smoothing" in capsys.readouterr().err


def test_make_task_flags_come_from_task_config(tmp_path, capsys):
    from offrl.cli import main
    from offrl.prefs.task import TaskConfig

    args = _subparser("make-task").parse_args(["--out", "x"])
    for f in dataclasses.fields(TaskConfig):
        if f.name != "tasks":
            assert getattr(args, f"cfg__{f.name}") == getattr(TaskConfig(), f.name), f.name
    assert main(["prefs", "make-task", "--out", str(tmp_path / "t"), "--layers", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--layers is 0; it must be an integer > 0" in err[0] and not (tmp_path / "t").exists()
