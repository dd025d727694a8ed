"""A single-file PyTorch MOPO (Yu et al. 2020): dynamics ensemble, its fit, model rollouts and the
SAC learner, the speed peer of offrl's :mod:`offrl.dynamics` and ``mopo`` (benchmarks/model_based_speed.py).

Written for offrl's benchmarks, following the structure of OfflineRL-Kit's implementation
(``offlinerlkit/modules/dynamics_module.py``, ``dynamics/ensemble_dynamics.py``,
``policy/model_free/sac.py``, ``policy/model_based/mopo.py``, ``policy_trainer/mb_policy_trainer.py``),
so that each step does the work that library does:

* the model is ``M`` members as one network: every layer a ``(M, in, out)`` weight applied by one
  batched matmul, swish between layers, 4 x 200 hidden; each member predicts the mean and the
  log-variance of ``(s' - s, r)`` from ``(s, a)`` standardised by the training split's statistics;
  the log-variance is soft-clamped, ``v = v_max - softplus(v_max - h)``, ``v = v_min + softplus(v - v_min)``,
  with ``v_max`` (init 0.5) and ``v_min`` (init -10) learned vectors shared by the members;
* the model loss per minibatch (rows ``(M, B, .)``, each member its own shuffle of the training split)::

      L = sum_i mean_rows,dims [(m_i - y)^2 exp(-v_i) + v_i] + sum_l c_l / 2 ||W_l||^2
          + 0.01 (sum v_max - sum v_min)

  with OfflineRL-Kit's MOPO decays ``c = (2.5e-5, 5e-5, 7.5e-5, 7.5e-5, 1e-4)`` (one per layer,
  on the weights only); Adam 1e-3; an epoch walks the whole training split in minibatches of 256,
  then scores the held-out rows (``min(0.2 n, 1000)``) by each member's MSE, keeps a member's weights
  when its held-out MSE improves by more than 1%, and reshuffles every member's rows;
* a model step (in NumPy on the host, as OfflineRL-Kit does): every member's Gaussian sample, one
  random elite per row, ``r - lambda max_i ||sigma_i||_2`` (MOPO's penalty); a rollout of length
  ``h`` from a batch of dataset states with the actor in the loop drops the rows that terminated;
* the learner is SAC: a tanh-Gaussian actor (2 x 256 ReLU, state-dependent ``log std`` clamped to
  ``[-5, 2]``), two separate critics (2 x 256 ReLU, each with its own Adam), automatic entropy tuning
  (``log alpha`` from 0, alpha clamped to ``[0, 1]``); one update is critic 1, critic 2, actor,
  alpha, Polyak step of the target critics, on a batch of ``int(0.05 B)`` real rows and the rest
  drawn from the model buffer (a ring of ``rollout batch x h x 5`` rows).

Where it differs from OfflineRL-Kit (none of it changes the work per step): its own code, not a copy;
the weights kept for early stopping are buffers rather than parameters (OfflineRL-Kit registers them as
parameters that never receive a gradient, so its Adam skips them too); no logger, no checkpoints, no
evaluation episodes; a given termination function instead of the task's; the critics optionally with
LayerNorm (``critic_layer_norm``, offrl's MOPO default; off in OfflineRL-Kit). Where offrl differs
from both: it also normalises the targets, has a learned terminal logit per member (one extra
output unit and a BCE term), keeps ``v_max``/``v_min`` per member, and its rollouts keep every row
(terminated ones masked) in fixed shapes.

Example::

    model = EnsembleDynamics(obs_dim=11, action_dim=3)
    model.fit_epoch(inputs, targets)                     # one epoch of minibatch steps + held-out scores
    agent = MOPO(obs_dim=11, action_dim=3, dynamics=model, penalty_coef=1.0)
    agent.refill(real_buffer, starts=50_000, horizon=5)  # a rollout into the model buffer
    info = agent.update(*agent.mixed_batch(real_buffer, 256))
"""

from __future__ import annotations

import copy
import math
from typing import Callable, Sequence

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

#: OfflineRL-Kit's MOPO weight decays, one per layer of a 4 x 200 model (run_example/run_mopo.py).
KIT_WEIGHT_DECAYS = (2.5e-5, 5e-5, 7.5e-5, 7.5e-5, 1e-4)


def never_terminal(obs: np.ndarray, actions: np.ndarray, next_obs: np.ndarray) -> np.ndarray:
    """``(N, 1)`` False: a task whose episodes never end (HalfCheetah's, within its state bounds)."""
    return np.zeros((obs.shape[0], 1), bool)


def mopo_uncertainty(std: np.ndarray) -> np.ndarray:
    """MOPO's ``u(s, a) = max_i ||sigma_i(s, a)||_2`` over the members ``i`` of ``std`` ``(M, N, D)``: ``(N,)``."""
    return np.amax(np.linalg.norm(std, axis=2), axis=0)


# ---------------------------------------------------------------------- the dynamics ensemble


class EnsembleLinear(nn.Module):
    """``M`` affine maps ``(M, B, in) -> (M, B, out)`` (a 2-D input is shared by all members);
    weights truncated-normal with std ``1 / (2 sqrt(in))``, biases 0, decay ``c / 2 ||W||^2``."""

    def __init__(self, fan_in: int, fan_out: int, members: int, weight_decay: float = 0.0):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(members, fan_in, fan_out))
        self.bias = nn.Parameter(torch.zeros(members, 1, fan_out))
        nn.init.trunc_normal_(self.weight, std=1.0 / (2.0 * math.sqrt(fan_in)))
        self.register_buffer("kept_weight", self.weight.detach().clone())
        self.register_buffer("kept_bias", self.bias.detach().clone())
        self.weight_decay = weight_decay

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.matmul(x, self.weight) + self.bias

    def decay_loss(self) -> torch.Tensor:
        return 0.5 * self.weight_decay * self.weight.pow(2).sum()

    def keep(self, members: list[int]) -> None:
        self.kept_weight[members] = self.weight.detach()[members]
        self.kept_bias[members] = self.bias.detach()[members]

    def restore(self) -> None:
        with torch.no_grad():
            self.weight.copy_(self.kept_weight)
            self.bias.copy_(self.kept_bias)


def soft_clamp(x: torch.Tensor, low: torch.Tensor, high: torch.Tensor) -> torch.Tensor:
    """``v = high - softplus(high - x)``, then ``low + softplus(v - low)``: a clamp into ``[low, high]`` that keeps a gradient."""
    x = high - F.softplus(high - x)
    return low + F.softplus(x - low)


class EnsembleModel(nn.Module):
    """``(M, B, obs + act) -> (mean, logvar)`` of ``(s' - s, r)``, each ``(M, B, obs + 1)``."""

    def __init__(self, obs_dim: int, action_dim: int, hidden_dims: Sequence[int] = (200, 200, 200, 200),
                 members: int = 7, weight_decays: Sequence[float] = KIT_WEIGHT_DECAYS):
        super().__init__()
        if len(weight_decays) != len(hidden_dims) + 1:
            raise ValueError(f"{len(hidden_dims) + 1} layers need as many weight decays, not {len(weight_decays)}")
        widths = [obs_dim + action_dim, *hidden_dims]
        self.hidden = nn.ModuleList(EnsembleLinear(i, o, members, c)
                                    for i, o, c in zip(widths[:-1], widths[1:], weight_decays[:-1]))
        self.out_dim = obs_dim + 1
        self.output = EnsembleLinear(widths[-1], 2 * self.out_dim, members, weight_decays[-1])
        self.max_logvar = nn.Parameter(torch.full((self.out_dim,), 0.5))
        self.min_logvar = nn.Parameter(torch.full((self.out_dim,), -10.0))
        self.members = members

    def forward(self, x) -> tuple[torch.Tensor, torch.Tensor]:
        h = torch.as_tensor(x, dtype=torch.float32)
        for layer in self.hidden:
            h = F.silu(layer(h))
        mean, raw = torch.chunk(self.output(h), 2, dim=-1)
        return mean, soft_clamp(raw, self.min_logvar, self.max_logvar)

    def layers(self) -> list[EnsembleLinear]:
        return [*self.hidden, self.output]

    def decay_loss(self) -> torch.Tensor:
        return sum(layer.decay_loss() for layer in self.layers())


def gaussian_nll(mean: torch.Tensor, logvar: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """``sum_i mean_rows,dims [(m_i - y)^2 exp(-v_i) + v_i]`` (twice the NLL up to a constant)."""
    return ((mean - targets).pow(2) * torch.exp(-logvar)).mean(dim=(1, 2)).sum() + logvar.mean(dim=(1, 2)).sum()


def model_loss(model: EnsembleModel, inputs, targets: torch.Tensor, logvar_coef: float = 0.01) -> torch.Tensor:
    """The minibatch loss of the module docstring on rows ``(M, B, .)``."""
    mean, logvar = model(inputs)
    return (gaussian_nll(mean, logvar, targets) + model.decay_loss()
            + logvar_coef * model.max_logvar.sum() - logvar_coef * model.min_logvar.sum())


class EnsembleDynamics:
    """The model with its input scaler, optimiser, held-out split, elites and NumPy step."""

    def __init__(self, obs_dim: int, action_dim: int, hidden_dims: Sequence[int] = (200, 200, 200, 200),
                 members: int = 7, elites: int = 5, weight_decays: Sequence[float] = KIT_WEIGHT_DECAYS,
                 lr: float = 1e-3, batch_size: int = 256, penalty_coef: float = 1.0,
                 terminal_fn: Callable = never_terminal, seed: int = 0):
        torch.manual_seed(seed)
        self.model = EnsembleModel(obs_dim, action_dim, hidden_dims, members, weight_decays)
        self.optim = torch.optim.Adam(self.model.parameters(), lr=lr)
        self.elites = np.arange(elites)
        self.num_elites, self.batch_size, self.penalty_coef = elites, batch_size, penalty_coef
        self.terminal_fn = terminal_fn
        self.rng = np.random.default_rng(seed)
        self.mu = np.zeros((1, obs_dim + action_dim), np.float32)
        self.sigma = np.ones((1, obs_dim + action_dim), np.float32)

    # -- fit
    def begin_fit(self, observations, actions, rewards, next_observations, holdout_ratio: float = 0.2,
                  max_holdout: int = 1000) -> None:
        """Split the rows, fit the scaler on the training split, draw each member's row order."""
        inputs = np.concatenate([observations, actions], -1).astype(np.float32)
        targets = np.concatenate([next_observations - observations, np.reshape(rewards, (-1, 1))], -1).astype(np.float32)
        n = inputs.shape[0]
        held = min(int(n * holdout_ratio), max_holdout)
        order = self.rng.permutation(n)
        train, hold = order[: n - held], order[n - held:]
        self.mu = inputs[train].mean(0, keepdims=True)
        self.sigma = inputs[train].std(0, keepdims=True)
        self.sigma[self.sigma < 1e-12] = 1.0
        self.train_inputs, self.train_targets = (inputs[train] - self.mu) / self.sigma, targets[train]
        self.hold_inputs, self.hold_targets = (inputs[hold] - self.mu) / self.sigma, targets[hold]
        self.rows = self.rng.integers(0, n - held, size=(self.model.members, n - held))
        self.best = np.full(self.model.members, 1e10)
        self.epochs_since = 0

    def learn(self, inputs: np.ndarray, targets: np.ndarray) -> float:
        """Minibatch steps over per-member rows ``(M, N, .)``; the mean loss."""
        losses = []
        for start in range(0, inputs.shape[1], self.batch_size):
            loss = model_loss(self.model, inputs[:, start:start + self.batch_size],
                              torch.as_tensor(targets[:, start:start + self.batch_size]))
            self.optim.zero_grad()
            loss.backward()
            self.optim.step()
            losses.append(loss.item())
        return float(np.mean(losses))

    @torch.no_grad()
    def validate(self) -> np.ndarray:
        """``(M,)`` held-out MSE of each member's mean."""
        mean, _ = self.model(self.hold_inputs)
        return ((mean - torch.as_tensor(self.hold_targets)) ** 2).mean(dim=(1, 2)).numpy()

    def fit_epoch(self) -> dict:
        """One epoch (:meth:`learn` over the whole training split, then held-out scores, the 1% rule,
        a reshuffle of every member's rows); ``{"loss", "steps", "holdout_mse"}``."""
        loss = self.learn(self.train_inputs[self.rows], self.train_targets[self.rows])
        mse = self.validate()
        improved = [i for i in range(len(mse)) if (self.best[i] - mse[i]) / self.best[i] > 0.01]
        if improved:
            for layer in self.model.layers():
                layer.keep(improved)
            self.best[improved] = mse[improved]
            self.epochs_since = 0
        else:
            self.epochs_since += 1
        keys = self.rng.random(self.rows.shape)
        self.rows = self.rows[np.arange(self.rows.shape[0])[:, None], np.argsort(keys, axis=-1)]
        return {"loss": loss, "steps": math.ceil(self.rows.shape[1] / self.batch_size), "holdout_mse": mse}

    def end_fit(self) -> None:
        """The kept weights, the ``num_elites`` members with the lowest held-out MSE."""
        self.elites = np.argsort(self.best)[: self.num_elites]
        for layer in self.model.layers():
            layer.restore()

    # -- a model step
    @torch.no_grad()
    def step(self, obs: np.ndarray, actions: np.ndarray):
        """``(s', r - lambda u, terminal, u)`` for each row, a random elite's Gaussian sample."""
        x = (np.concatenate([obs, actions], -1) - self.mu) / self.sigma
        mean, logvar = self.model(x)
        mean, logvar = mean.numpy(), logvar.numpy()
        mean[..., :-1] += obs
        std = np.sqrt(np.exp(logvar))
        samples = (mean + self.rng.standard_normal(mean.shape) * std).astype(np.float32)
        n = obs.shape[0]
        chosen = samples[self.rng.choice(self.elites, size=n), np.arange(n)]
        next_obs, rewards = chosen[:, :-1], chosen[:, -1:]
        uncertainty = mopo_uncertainty(std)[:, None].astype(np.float32)
        return next_obs, rewards - self.penalty_coef * uncertainty, self.terminal_fn(obs, actions, next_obs), uncertainty


# ---------------------------------------------------------------------- buffers


class ReplayBuffer:
    """A NumPy ring of transitions; :meth:`sample` returns float32 tensors with ``(B, 1)`` rewards/terminals."""

    def __init__(self, capacity: int, obs_dim: int, action_dim: int, seed: int = 0):
        self.capacity, self.pointer, self.size = capacity, 0, 0
        self.data = {"observations": np.zeros((capacity, obs_dim), np.float32),
                     "actions": np.zeros((capacity, action_dim), np.float32),
                     "next_observations": np.zeros((capacity, obs_dim), np.float32),
                     "rewards": np.zeros((capacity, 1), np.float32), "terminals": np.zeros((capacity, 1), np.float32)}
        self.rng = np.random.default_rng(seed)

    @classmethod
    def of(cls, observations, actions, rewards, next_observations, terminals, seed: int = 0) -> "ReplayBuffer":
        n = len(observations)
        buffer = cls(n, observations.shape[1], actions.shape[1], seed)
        buffer.add(observations, actions, rewards, next_observations, terminals)
        return buffer

    def add(self, observations, actions, rewards, next_observations, terminals) -> None:
        n = len(observations)
        idx = np.arange(self.pointer, self.pointer + n) % self.capacity
        for key, value in zip(("observations", "actions", "rewards", "next_observations", "terminals"),
                              (observations, actions, rewards, next_observations, terminals)):
            self.data[key][idx] = np.asarray(value, np.float32).reshape(n, -1)
        self.pointer, self.size = (self.pointer + n) % self.capacity, min(self.size + n, self.capacity)

    def sample(self, n: int) -> dict[str, torch.Tensor]:
        idx = self.rng.integers(0, self.size, size=n)
        return {k: torch.tensor(v[idx]) for k, v in self.data.items()}


# ---------------------------------------------------------------------- the SAC learner


def mlp(fan_in: int, hidden: Sequence[int], layer_norm: bool = False) -> nn.Sequential:
    blocks: list[nn.Module] = []
    for width in hidden:
        blocks += [nn.Linear(fan_in, width), *([nn.LayerNorm(width)] if layer_norm else []), nn.ReLU()]
        fan_in = width
    return nn.Sequential(*blocks)


class Critic(nn.Module):
    def __init__(self, obs_dim: int, action_dim: int, hidden: Sequence[int], layer_norm: bool = False):
        super().__init__()
        self.net = nn.Sequential(mlp(obs_dim + action_dim, hidden, layer_norm), nn.Linear(hidden[-1], 1))

    def forward(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        return self.net(torch.cat([obs, actions], dim=1))  # (B, 1)


class TanhGaussianActor(nn.Module):
    def __init__(self, obs_dim: int, action_dim: int, hidden: Sequence[int]):
        super().__init__()
        self.trunk = mlp(obs_dim, hidden)
        self.mean, self.log_std = nn.Linear(hidden[-1], action_dim), nn.Linear(hidden[-1], action_dim)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(a, log pi(a|s))``, ``a = tanh(u)``, ``u ~ N(mean, std)`` reparameterised; ``log_prob`` ``(B, 1)``."""
        h = self.trunk(torch.as_tensor(obs, dtype=torch.float32))
        dist = torch.distributions.Normal(self.mean(h), self.log_std(h).clamp(-5.0, 2.0).exp())
        u = dist.rsample()
        a = torch.tanh(u)
        log_prob = dist.log_prob(u).sum(-1, keepdim=True) - torch.log(1.0 - a.pow(2) + 1e-6).sum(-1, keepdim=True)
        return a, log_prob


class MOPO:
    """SAC on real and model rows (the module docstring); actions in ``[-1, 1]``."""

    def __init__(self, obs_dim: int, action_dim: int, dynamics: EnsembleDynamics, hidden: Sequence[int] = (256, 256),
                 actor_lr: float = 1e-4, critic_lr: float = 3e-4, alpha_lr: float = 1e-4, gamma: float = 0.99,
                 tau: float = 5e-3, real_ratio: float = 0.05, rollout_starts: int = 50_000, horizon: int = 5,
                 retain: int = 5, critic_layer_norm: bool = False, seed: int = 0):
        torch.manual_seed(seed)
        self.actor = TanhGaussianActor(obs_dim, action_dim, hidden)
        self.critics = [Critic(obs_dim, action_dim, hidden, critic_layer_norm) for _ in range(2)]
        self.targets = [copy.deepcopy(c).requires_grad_(False) for c in self.critics]
        self.actor_opt = torch.optim.Adam(self.actor.parameters(), lr=actor_lr)
        self.critic_opts = [torch.optim.Adam(c.parameters(), lr=critic_lr) for c in self.critics]
        self.log_alpha = torch.zeros(1, requires_grad=True)
        self.alpha_opt = torch.optim.Adam([self.log_alpha], lr=alpha_lr)
        self.alpha = self.log_alpha.detach().exp()
        self.target_entropy = -float(action_dim)
        self.dynamics, self.gamma, self.tau, self.real_ratio = dynamics, gamma, tau, real_ratio
        self.model_buffer = ReplayBuffer(rollout_starts * horizon * retain, obs_dim, action_dim, seed + 1)

    @torch.no_grad()
    def act(self, obs: np.ndarray) -> np.ndarray:
        return self.actor(obs)[0].numpy()

    def rollout(self, starts: np.ndarray, horizon: int) -> dict[str, np.ndarray]:
        """``horizon`` model steps of the stochastic actor from ``starts``; terminated rows are dropped."""
        out: dict[str, list] = {k: [] for k in ("observations", "actions", "rewards", "next_observations", "terminals")}
        obs = starts
        for _ in range(horizon):
            actions = self.act(obs)
            next_obs, rewards, terminals, _ = self.dynamics.step(obs, actions)
            for k, v in zip(out, (obs, actions, rewards, next_obs, terminals)):
                out[k].append(v)
            alive = ~terminals.reshape(-1)
            if not alive.any():
                break
            obs = next_obs[alive]
        return {k: np.concatenate(v, 0) for k, v in out.items()}

    def refill(self, real: ReplayBuffer, starts: int, horizon: int) -> int:
        """One rollout from ``starts`` dataset states into the model buffer; the transitions added."""
        traj = self.rollout(real.sample(starts)["observations"].numpy(), horizon)
        self.model_buffer.add(traj["observations"], traj["actions"], traj["rewards"], traj["next_observations"],
                              traj["terminals"])
        return len(traj["rewards"])

    def mixed_batch(self, real: ReplayBuffer, batch_size: int):
        """``int(real_ratio * B)`` real rows then model rows, as ``(s, a, r, s', terminal)``."""
        n_real = int(batch_size * self.real_ratio)
        r, m = real.sample(n_real), self.model_buffer.sample(batch_size - n_real)
        return tuple(torch.cat([r[k], m[k]], 0) for k in ("observations", "actions", "rewards", "next_observations", "terminals"))

    def update(self, obs, actions, rewards, next_obs, terminals) -> dict[str, float]:
        """Critic 1, critic 2, actor, alpha, Polyak (OfflineRL-Kit's order)."""
        with torch.no_grad():
            next_a, next_log_prob = self.actor(next_obs)
            next_q = torch.min(*(t(next_obs, next_a) for t in self.targets)) - self.alpha * next_log_prob
            target = rewards + self.gamma * (1.0 - terminals) * next_q
        critic_losses = []
        for critic, opt in zip(self.critics, self.critic_opts):
            loss = (critic(obs, actions) - target).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            critic_losses.append(loss)

        a, log_prob = self.actor(obs)
        actor_loss = self.alpha * log_prob.mean() - torch.min(*(c(obs, a) for c in self.critics)).mean()
        self.actor_opt.zero_grad()
        actor_loss.backward()
        self.actor_opt.step()

        alpha_loss = -(self.log_alpha * (log_prob.detach() + self.target_entropy)).mean()
        self.alpha_opt.zero_grad()
        alpha_loss.backward()
        self.alpha_opt.step()
        self.alpha = self.log_alpha.detach().exp().clamp(0.0, 1.0)

        with torch.no_grad():
            for target_net, critic in zip(self.targets, self.critics):
                for tp, p in zip(target_net.parameters(), critic.parameters()):
                    tp.lerp_(p, self.tau)
        return {"critic_loss": sum(loss.item() for loss in critic_losses), "actor_loss": actor_loss.item(),
                "alpha": self.alpha.item()}
