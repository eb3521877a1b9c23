"""Trajectories → padded tensors, straight from the token ids of their segments.

Layout: prompts are left-padded to `P`, responses right-padded to `R`, so response token `t`
of every row sits at column `P + t` and is predicted by the logits at column `P + t − 1`.
The masks come from segment roles (`Trajectory.loss_mask`), never from re-tokenizing text.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields

import torch
from torch import Tensor

from searchrl.types import Trajectory


@dataclass
class Batch:
    """A padded batch of trajectories. Row order = input order."""

    input_ids: Tensor  # [B, P + R] prompt (left-padded) then response (right-padded)
    attention_mask: Tensor  # [B, P + R] 1 on real tokens
    position_ids: Tensor  # [B, P + R] positions counted from each row's first real token
    response_ids: Tensor  # [B, R]
    response_mask: Tensor  # [B, R] 1 on real response tokens
    policy_mask: Tensor  # [B, R] 1 on tokens the policy generated (role policy [+ meta])

    @property
    def response_length(self) -> int:
        """R, the padded response width."""
        return self.response_ids.shape[1]

    def select(self, index: Tensor | Sequence[int]) -> Batch:
        """Rows `index`, with padding columns no selected row needs trimmed away."""
        idx = torch.as_tensor(index, dtype=torch.long)
        rows = {f.name: getattr(self, f.name)[idx] for f in fields(self)}
        prompt_width = self.input_ids.shape[1] - self.response_length
        prompt_mask = rows["attention_mask"][:, :prompt_width]
        first = int((prompt_mask.sum(0) > 0).nonzero().min()) if prompt_mask.any() else 0
        keep_r = max(int(rows["response_mask"].sum(-1).max()), 1)
        seq = slice(first, prompt_width + keep_r)
        return Batch(
            input_ids=rows["input_ids"][:, seq],
            attention_mask=rows["attention_mask"][:, seq],
            position_ids=rows["position_ids"][:, seq],
            response_ids=rows["response_ids"][:, :keep_r],
            response_mask=rows["response_mask"][:, :keep_r],
            policy_mask=rows["policy_mask"][:, :keep_r],
        )


def collate(trajectories: Sequence[Trajectory], pad_id: int, include_meta: bool = False) -> Batch:
    """Pad a list of trajectories into one `Batch`."""
    if not trajectories:
        raise ValueError("cannot collate an empty list of trajectories")
    prompt_width = max(len(t.prompt_ids) for t in trajectories)
    response_width = max(max(len(t.response_ids) for t in trajectories), 1)
    batch = len(trajectories)
    input_ids = torch.full((batch, prompt_width + response_width), pad_id, dtype=torch.long)
    attention = torch.zeros_like(input_ids)
    policy = torch.zeros(batch, response_width, dtype=torch.long)
    for row, traj in enumerate(trajectories):
        prompt, response = traj.prompt_ids, traj.response_ids
        start = prompt_width - len(prompt)
        input_ids[row, start:prompt_width] = torch.tensor(prompt, dtype=torch.long)
        input_ids[row, prompt_width : prompt_width + len(response)] = torch.tensor(
            response, dtype=torch.long
        )
        attention[row, start : prompt_width + len(response)] = 1
        policy[row, : len(response)] = torch.tensor(traj.loss_mask(include_meta), dtype=torch.long)
    positions = (attention.cumsum(-1) - 1).clamp(min=0)  # [B, P + R]
    return Batch(
        input_ids=input_ids,
        attention_mask=attention,
        position_ids=positions,
        response_ids=input_ids[:, prompt_width:],
        response_mask=attention[:, prompt_width:],
        policy_mask=policy,
    )
