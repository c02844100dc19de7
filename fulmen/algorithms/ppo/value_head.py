"""The value head: a linear map from the policy's last hidden state to a call's expected return.

It reads the hidden state at the last prompt token of a call, the state the call acts from,
so a call's value depends only on what the model saw (a causal model's hidden state there is
the same whether or not the completion follows it). Its weights are float32 whatever the
policy's dtype, and it runs outside autocast, as the LM head does (``policy._Float32Head``).
It starts at zero, so every value is 0 before the first update and the value loss sends no
gradient into the shared trunk until the head has learned something. Torch is imported here,
never by ``import fulmen``.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

__all__ = ["ValueHead"]


class ValueHead(nn.Module):
    """``V(h) = w · h + b`` per row of hidden states, in float32; zero at initialization.

    Args:
        hidden_size: the width of the policy's hidden states.
    """

    def __init__(self, hidden_size: int) -> None:
        super().__init__()
        self.linear = nn.Linear(hidden_size, 1, dtype=torch.float32)
        nn.init.zeros_(self.linear.weight)
        nn.init.zeros_(self.linear.bias)

    def forward(self, hidden: Tensor) -> Tensor:
        """Return one value per row of ``hidden`` (``[..., H] -> [...]``)."""
        with torch.autocast(hidden.device.type, enabled=False):
            return self.linear(hidden.float()).squeeze(-1)
