"""A single-file PyTorch SAC-N / EDAC (An, Moon, Kim & Song 2021), the speed peer of offrl's
``sac_n`` and ``edac`` (no package ships either; benchmarks/ensemble_speed.py times both).

Written for offrl's benchmarks, following the structure of CORL's ``algorithms/offline/edac.py``
(itself after the authors' snu-mllab/EDAC code), so that the two sides do the same work per update:

* the N critics are one vectorised network: each layer a ``(N, in, out)`` weight applied by one
  batched matmul (``x @ W + b`` over the ensemble axis), never a Python loop over members;
* the actor is a tanh-Gaussian MLP with ``log_std`` clipped to ``[-5, 2]``; the log-density
  uses the change of variables ``log N(u) - sum log(1 - tanh(u)^2 + 1e-6)``;
* one update runs, in this order (the authors' order, as CORL notes): the entropy temperature
  ``L_alpha = -log_alpha (log pi(a|s) + H_target)``, the actor
  ``L_pi = mean(alpha log pi(a|s) - min_k Q_k(s, a))``, the critics
  ``L_Q = sum_k mean_i (Q_k(s_i, a_i) - y_i)^2 + eta * ESD`` with
  ``y = r + gamma (1 - d) (min_k Q'_k(s', a') - alpha log pi(a'|s'))``, and the Polyak update of
  the target critics; ``ESD = 1/(N-1) mean_i sum_{k != l} <u_k, u_l>``, ``u_k`` the unit
  gradient ``grad_a Q_k(s_i, a_i)`` (a second-order term: ``create_graph=True``). With
  ``eta = 0`` (SAC-N) the diversity pass is skipped entirely;
* initialisation as in the EDAC paper: hidden biases 0.1, the output layers uniform in a small range.

Example::

    agent = SACN(obs_dim=17, action_dim=6, hidden=256, layers=3, num_critics=10, eta=1.0)
    info = agent.update(*agent.sample(arrays, 256))
"""

from __future__ import annotations

import copy
import math

import numpy as np
import torch
import torch.nn as nn


class EnsembleLinear(nn.Module):
    """``N`` independent affine maps applied at once: ``(N, B, in) -> (N, B, out)``."""

    def __init__(self, n: int, fan_in: int, fan_out: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n, fan_in, fan_out))
        self.bias = nn.Parameter(torch.empty(n, 1, fan_out))
        bound = 1.0 / math.sqrt(fan_in)
        for k in range(n):  # PyTorch's nn.Linear default, member by member
            nn.init.kaiming_uniform_(self.weight[k].T, a=math.sqrt(5))
        nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.baddbmm(self.bias, x, self.weight)


class EnsembleCritic(nn.Module):
    def __init__(self, obs_dim: int, action_dim: int, hidden: int, layers: int, n: int):
        super().__init__()
        widths = [obs_dim + action_dim] + [hidden] * layers
        blocks: list[nn.Module] = []
        for fan_in, fan_out in zip(widths[:-1], widths[1:]):
            linear = EnsembleLinear(n, fan_in, fan_out)
            nn.init.constant_(linear.bias, 0.1)
            blocks += [linear, nn.ReLU()]
        head = EnsembleLinear(n, hidden, 1)
        nn.init.uniform_(head.weight, -3e-3, 3e-3)
        nn.init.uniform_(head.bias, -3e-3, 3e-3)
        self.net = nn.Sequential(*blocks, head)
        self.n = n

    def forward(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """``Q_k(s, a)`` as ``(N, B)``; inputs ``(B, d)`` are shared by all members, ``(N, B, d)`` are per member."""
        x = torch.cat([obs, actions], dim=-1)
        if x.dim() == 2:
            x = x.expand(self.n, *x.shape)
        return self.net(x).squeeze(-1)


class TanhGaussianActor(nn.Module):
    def __init__(self, obs_dim: int, action_dim: int, hidden: int, layers: int):
        super().__init__()
        widths = [obs_dim] + [hidden] * layers
        blocks: list[nn.Module] = []
        for fan_in, fan_out in zip(widths[:-1], widths[1:]):
            linear = nn.Linear(fan_in, fan_out)
            nn.init.constant_(linear.bias, 0.1)
            blocks += [linear, nn.ReLU()]
        self.trunk = nn.Sequential(*blocks)
        self.mean, self.log_std = nn.Linear(hidden, action_dim), nn.Linear(hidden, action_dim)
        for head in (self.mean, self.log_std):
            nn.init.uniform_(head.weight, -1e-3, 1e-3)
            nn.init.uniform_(head.bias, -1e-3, 1e-3)

    def forward(self, obs: torch.Tensor, deterministic: bool = False):
        h = self.trunk(obs)
        mean, log_std = self.mean(h), self.log_std(h).clamp(-5.0, 2.0)
        std = log_std.exp()
        u = mean if deterministic else mean + std * torch.randn_like(mean)
        a = torch.tanh(u)
        log_prob = (-0.5 * ((u - mean) / std) ** 2 - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)
        return a, log_prob - torch.log(1.0 - a.pow(2) + 1e-6).sum(-1)


class SACN:
    """SAC-N (``eta = 0``) or EDAC (``eta > 0``); actions in ``[-1, 1]``."""

    def __init__(self, obs_dim: int, action_dim: int, hidden: int = 256, layers: int = 3, num_critics: int = 10,
                 eta: float = 0.0, gamma: float = 0.99, tau: float = 5e-3, lr: float = 3e-4, seed: int = 0):
        torch.manual_seed(seed)
        self.actor = TanhGaussianActor(obs_dim, action_dim, hidden, layers)
        self.critic = EnsembleCritic(obs_dim, action_dim, hidden, layers, num_critics)
        self.target_critic = copy.deepcopy(self.critic).requires_grad_(False)
        self.log_alpha = torch.zeros(1, requires_grad=True)
        self.actor_opt = torch.optim.Adam(self.actor.parameters(), lr=lr)
        self.critic_opt = torch.optim.Adam(self.critic.parameters(), lr=lr)
        self.alpha_opt = torch.optim.Adam([self.log_alpha], lr=lr)
        self.target_entropy = -float(action_dim)
        self.n, self.eta, self.gamma, self.tau = num_critics, eta, gamma, tau
        self.rng = np.random.default_rng(seed)

    def sample(self, arrays: dict, batch_size: int):
        """``batch_size`` i.i.d. rows of ``arrays`` (torch tensors) as ``(s, a, r, s', done)``."""
        idx = torch.from_numpy(self.rng.integers(0, arrays["rewards"].shape[0], batch_size))
        return tuple(arrays[k][idx] for k in ("observations", "actions", "rewards", "next_observations", "terminals"))

    def diversity(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """EDAC's ESD over the ensemble's unit action gradients at the data's actions."""
        a = actions.expand(self.n, *actions.shape).clone().requires_grad_(True)
        q = self.critic(obs.expand(self.n, *obs.shape), a)
        (grads,) = torch.autograd.grad(q.sum(), a, create_graph=True)
        unit = grads / (grads.norm(dim=-1, keepdim=True) + 1e-10)          # (N, B, d)
        unit = unit.transpose(0, 1)                                          # (B, N, d)
        gram = torch.bmm(unit, unit.transpose(1, 2))                         # (B, N, N)
        off_diagonal = gram.sum(dim=(1, 2)) - torch.diagonal(gram, dim1=1, dim2=2).sum(-1)
        return off_diagonal.mean() / (self.n - 1)

    def update(self, obs, actions, rewards, next_obs, dones) -> dict[str, float]:
        with torch.no_grad():
            _, log_prob = self.actor(obs)
        alpha_loss = (-self.log_alpha * (log_prob + self.target_entropy)).mean()
        self.alpha_opt.zero_grad()
        alpha_loss.backward()
        self.alpha_opt.step()
        alpha = self.log_alpha.exp().detach()

        pi, log_prob = self.actor(obs)
        actor_loss = (alpha * log_prob - self.critic(obs, pi).min(0).values).mean()
        self.actor_opt.zero_grad()
        actor_loss.backward()
        self.actor_opt.step()

        with torch.no_grad():
            next_a, next_log_prob = self.actor(next_obs)
            next_q = self.target_critic(next_obs, next_a).min(0).values - alpha * next_log_prob
            target = rewards + self.gamma * (1.0 - dones) * next_q
        critic_loss = ((self.critic(obs, actions) - target[None]) ** 2).mean(1).sum()
        if self.eta > 0:
            critic_loss = critic_loss + self.eta * self.diversity(obs, actions)
        self.critic_opt.zero_grad()
        critic_loss.backward()
        self.critic_opt.step()

        with torch.no_grad():
            for target_p, p in zip(self.target_critic.parameters(), self.critic.parameters()):
                target_p.lerp_(p, self.tau)
        return {"critic_loss": critic_loss.item(), "actor_loss": actor_loss.item(), "alpha": alpha.item()}


def as_tensors(observations, actions, rewards, next_observations, terminals) -> dict:
    """Host arrays as the float32 tensors :meth:`SACN.sample` draws from."""
    f = lambda x: torch.as_tensor(np.asarray(x, np.float32))  # noqa: E731
    return {"observations": f(observations), "actions": f(actions), "rewards": f(rewards).reshape(-1),
            "next_observations": f(next_observations), "terminals": f(terminals).reshape(-1)}
