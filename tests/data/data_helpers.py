"""Shared builders for the data-layer tests."""

import numpy as np
from offrl.data import Dataset


def make_dataset(seed=0, lengths=(20, 15, 15), obs_dim=3, act_dim=2, terminal_eps=(1,), metadata=None,
                 action_scale=1.0, return_scale=None):
    """Contiguous episodes; episode k in ``terminal_eps`` ends with a terminal, others with a timeout."""
    rng = np.random.default_rng(seed)
    obs, nxt, act, rew, term, tout = [], [], [], [], [], []
    for k, t in enumerate(lengths):
        seq = rng.normal(size=(t + 1, obs_dim)).astype(np.float32)
        obs.append(seq[:-1])
        nxt.append(seq[1:])
        act.append(rng.uniform(-action_scale, action_scale, size=(t, act_dim)).astype(np.float32))
        r = rng.normal(size=t).astype(np.float32)
        if return_scale is not None:
            r = (r * 0.1 + return_scale[k] / t).astype(np.float32)
        rew.append(r)
        e_term = np.zeros(t, bool)
        e_tout = np.zeros(t, bool)
        (e_term if k in terminal_eps else e_tout)[-1] = True
        term.append(e_term)
        tout.append(e_tout)
    n = sum(lengths)
    return Dataset.from_arrays(
        np.concatenate(obs), np.concatenate(act), np.concatenate(rew), np.concatenate(term),
        np.concatenate(tout), np.concatenate(nxt),
        infos={"action_log_probs": rng.normal(size=n).astype(np.float32),
               "action_mean": rng.normal(size=(n, act_dim)).astype(np.float32)},
        metadata=metadata if metadata is not None else {
            "env_id": "Pendulum-v1", "tier": "random", "seed": 7, "generator": "tests",
            "policy_return": -1234.5, "action_low": [-1.0] * act_dim, "action_high": [1.0] * act_dim,
            "policy": {"hidden": [64, 64], "name": "sac"}})


def assert_same(a, b):
    aa, bb = a.arrays(), b.arrays()
    assert sorted(aa) == sorted(bb)
    for key in aa:
        assert aa[key].dtype == bb[key].dtype, key
        assert aa[key].shape == bb[key].shape, key
        np.testing.assert_array_equal(aa[key], bb[key], err_msg=key)
    assert dict(a.metadata) == dict(b.metadata)
