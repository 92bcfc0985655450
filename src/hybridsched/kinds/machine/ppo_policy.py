"""MaskablePPO's policy for the late-dispatch env's candidates (``ppo_train`` trains it,
``policies/ppo_late.py`` runs it): each candidate row of the observation is scored on its own,
``logit = MLP(features) - prior / tau`` (``prior = (finish - t) / m``, the row's last column),
so the policy does not depend on the candidates' order; with the MLP's output layer 0 the
greedy action is the candidate of earliest finish.  The critic embeds each offered row (the
prior as ``log1p``) and reads their mean and how many there are.

A saved model names :class:`CandidatePolicy` by import path, so loading it imports this module
(sb3-contrib and torch with it).
"""

from __future__ import annotations

from typing import Any

import torch
from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy
from torch import nn

from hybridsched.kinds.machine.late_choice import N_OBS
from hybridsched.kinds.machine.policies.late_dqn import N_FEAT

CRITIC_HIDDEN = 64


class CandidateNets(nn.Module):
    """The actor's per-candidate logits (one more, 0, for a wait action) and the critic's latent."""

    def __init__(self, rows: int, n_actions: int, hidden: int, tau: float) -> None:
        super().__init__()
        self.rows, self.n_actions, self.tau = rows, n_actions, tau
        self.actor = nn.Sequential(nn.Linear(N_FEAT, hidden), nn.Tanh(), nn.Linear(hidden, 1))
        self.critic_row = nn.Sequential(nn.Linear(N_OBS, CRITIC_HIDDEN), nn.Tanh())
        self.critic = nn.Sequential(nn.Linear(CRITIC_HIDDEN + 1, CRITIC_HIDDEN), nn.Tanh())
        self.latent_dim_pi, self.latent_dim_vf = n_actions, CRITIC_HIDDEN

    def forward_actor(self, features: torch.Tensor) -> torch.Tensor:
        """Logits, one per action, from the flattened observations."""
        x = features.reshape(-1, self.rows, N_OBS)
        z = self.actor(x[..., :N_FEAT]).squeeze(-1) - x[..., N_FEAT] / self.tau
        if self.n_actions > self.rows:
            z = torch.cat([z, torch.zeros_like(z[:, :1])], dim=1)
        return z

    def forward_critic(self, features: torch.Tensor) -> torch.Tensor:
        """The value head's input: the mean of the offered rows' embeddings and the log count of
        offered rows (the same network for any ``max_candidates``)."""
        x = features.reshape(-1, self.rows, N_OBS)
        # the prior has no upper bound: its log keeps the critic's inputs small
        x = torch.cat([x[..., :N_FEAT], torch.log1p(x[..., N_FEAT:])], dim=-1)
        offered = (x.abs().sum(-1, keepdim=True) > 0).to(x.dtype)  # rows past the candidates are 0
        n = offered.sum(1).clamp(min=1.0)
        pooled = (self.critic_row(x) * offered).sum(1) / n
        return self.critic(torch.cat([pooled, torch.log1p(n)], dim=-1))

    def forward(self, features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.forward_actor(features), self.forward_critic(features)


class CandidatePolicy(MaskableActorCriticPolicy):
    """MaskablePPO's actor-critic with :class:`CandidateNets`: the actor's output is the logits
    (no action layer after it); ``hidden`` tanh units, prior temperature ``tau``."""

    def __init__(self, *args: Any, hidden: int = 32, tau: float = 0.3, **kwargs: Any) -> None:
        self.hidden, self.tau = hidden, tau
        super().__init__(*args, **kwargs)

    def _build_mlp_extractor(self) -> None:
        self.mlp_extractor = CandidateNets(self.observation_space.shape[0], int(self.action_space.n), self.hidden,
                                           self.tau)

    def _build(self, lr_schedule: Any) -> None:
        super()._build(lr_schedule)
        self.action_net = nn.Identity()
        with torch.no_grad():  # output 0: training starts from the earliest-finish choice
            self.mlp_extractor.actor[-1].weight.zero_()
            self.mlp_extractor.actor[-1].bias.zero_()
        # the optimizer over the parameters kept (the action layer replaced above is not one)
        self.optimizer = self.optimizer_class(self.parameters(), lr=lr_schedule(1), **self.optimizer_kwargs)

    def _get_constructor_parameters(self) -> dict[str, Any]:
        return {**super()._get_constructor_parameters(), "hidden": self.hidden, "tau": self.tau}
