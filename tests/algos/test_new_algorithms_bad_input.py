"""Bad input to the newer algorithms through the CLI: a config outside its range, an ensemble of
0 critics, and a dataset of the wrong action family are one line on stderr, exit 2, and no run
folder."""

import pytest

from offrl.cli import main

PENDULUM, CARTPOLE = "pendulum-medium-expert-v0", "cartpole-medium-expert-v0"

CASES = [
    # (algo, dataset, --set items, words the one line must hold)
    ("sac_n", PENDULUM, ["num_critics=0"], ["unknown config field 'num_critics'", "num_qs"]),
    ("sac_n", PENDULUM, ["num_qs=0"], ["'num_qs' of sac_n is 0", "integer >= 1"]),
    ("edac", PENDULUM, ["num_qs=0"], ["'num_qs' of edac is 0", "integer >= 2"]),
    ("edac", PENDULUM, ["num_qs=1"], ["'num_qs' of edac is 1", "integer >= 2"]),
    ("lb_sac", PENDULUM, ["num_qs=0"], ["'num_qs' of lb_sac is 0"]),
    ("bear", PENDULUM, ["num_qs=0"], ["'num_qs' of bear is 0"]),
    ("rebrac", PENDULUM, ["num_qs=0"], ["'num_qs' of rebrac is 0"]),
    ("rebrac", PENDULUM, ["actor_bc_weight=-1"], ["'actor_bc_weight' of rebrac is -1.0", ">= 0"]),
    ("cql", PENDULUM, ["variant=kl"], ["'variant' of cql is 'kl'", "'h', 'rho'"]),
    ("xql", PENDULUM, ["gumbel_temperature=0"], ["'gumbel_temperature' of xql is 0"]),
    ("crr", PENDULUM, ["weight_type=linear"], ["'weight_type' of crr"]),
    ("brac", PENDULUM, ["penalty=kl"], ["'penalty' of brac"]),
    ("spot", PENDULUM, ["batch_size=0"], ["'batch_size' of spot is 0"]),
    ("sac_n", CARTPOLE, [], ["2 discrete actions", "--algo sac_n is a continuous-action algorithm", "dqn"]),
    ("rebrac", CARTPOLE, [], ["--algo rebrac is a continuous-action algorithm"]),
    ("discrete_cql", PENDULUM, [], ["continuous 1-dimensional actions", "discrete-action algorithm", "sac_n"]),
]


@pytest.mark.parametrize("algo, dataset, items, words", CASES, ids=[f"{c[0]}-{'-'.join(c[2]) or c[1]}" for c in CASES])
def test_bad_input_is_one_line_exit_2_and_no_run_folder(tmp_path, capsys, algo, dataset, items, words):
    out = tmp_path / "run"
    argv = ["train", "--algo", algo, "--dataset", dataset, "--steps", "10", "--out", str(out), "--no-progress"]
    for item in items:
        argv += ["--set", item]
    code = main(argv)
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1 and all(w in err for w in words), err
    assert not out.exists()
