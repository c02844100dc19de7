"""The served model's LM head always multiplies a contiguous input.

Under peft, the last position's hidden state arrived as a strided ``[B, 1, H]`` view, and for
bfloat16 torch then expanded the whole vocabulary-sized weight per batch row (a copy of
several GB per forward with Gemma 3's 262k vocabulary).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_lm_head_input_is_contiguous_with_an_adapter_loaded(
    tiny_dir: Path, tool_adapter: Path, dtype: str
) -> None:
    from fulmen.engines.builtin.model import ServedModel

    model = ServedModel(tiny_dir, served_name="tiny", dtype=dtype)
    model.load_adapter("tool", str(tool_adapter))
    seen: list[Any] = []
    model.base.get_output_embeddings().register_forward_pre_hook(
        lambda _module, args: seen.append(args[0])
    )
    ids = torch.randint(0, 100, (3, 7))
    logits = model.forward(
        ids,
        torch.ones_like(ids),
        torch.arange(7).expand(3, 7),
        None,
        ["tool", None, "tool"],
    )
    assert logits.shape[0] == 3 and logits.dtype == torch.float32
    (head_input,) = seen
    assert head_input.shape == (3, 1, head_input.shape[-1])
    assert head_input.is_contiguous()
