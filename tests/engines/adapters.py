"""Builds real test weights for the tiny model: a trained LoRA adapter and a perturbed copy.

The adapter is trained (peft, a few hundred Adam steps, ~10 s on CPU) until greedy decoding of
one chat prompt reproduces a Hermes tool call exactly, so tests see the served output change
after the adapter is loaded and the tool-call path run end to end on real model output.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather of a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]
MESSAGES: list[dict[str, Any]] = [{"role": "user", "content": "What is the weather in Paris?"}]
CALL_ARGUMENTS = {"city": "Paris"}
TARGET = (
    '<tool_call>\n{"name": "get_weather", "arguments": '
    + json.dumps(CALL_ARGUMENTS)
    + "}\n</tool_call>"
)


def train_tool_call_adapter(model_dir: Path, out_dir: Path, *, rank: int = 8) -> Path:
    """Train a LoRA adapter so greedy chat output for MESSAGES+TOOLS is TARGET, then EOS."""
    with warnings.catch_warnings():  # peft calls a transformers API deprecated in v5
        warnings.simplefilter("ignore", FutureWarning)
        return _train(model_dir, out_dir, rank)


def _train(model_dir: Path, out_dir: Path, rank: int) -> Path:
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(str(model_dir))
    model = AutoModelForCausalLM.from_pretrained(str(model_dir))
    prompt = tok.apply_chat_template(
        MESSAGES, tools=TOOLS, add_generation_prompt=True, tokenize=False
    )
    prompt_ids = tok.encode(prompt, add_special_tokens=False)
    target_ids = tok.encode(TARGET + "<|im_end|>", add_special_tokens=False)
    ids = torch.tensor([prompt_ids + target_ids])
    labels = ids.clone()
    labels[0, : len(prompt_ids)] = -100
    config = LoraConfig(
        r=rank,
        lora_alpha=2 * rank,
        lora_dropout=0.0,
        target_modules=[
            "q_proj",
            "k_proj",
            "v_proj",
            "o_proj",
            "gate_proj",
            "up_proj",
            "down_proj",
        ],
    )
    peft_model = get_peft_model(model, config)
    optim = torch.optim.Adam([p for p in peft_model.parameters() if p.requires_grad], lr=3e-3)
    target = torch.tensor(target_ids)
    for step in range(600):
        out = peft_model(input_ids=ids, labels=labels)
        optim.zero_grad()
        out.loss.backward()
        optim.step()
        if step % 20 == 19:
            predicted = out.logits[0, len(prompt_ids) - 1 : -1].argmax(-1)
            if bool((predicted == target).all()) and out.loss.item() < 0.05:
                break
    else:
        raise RuntimeError(f"adapter did not memorize the target (loss {out.loss.item():.3f})")
    peft_model.save_pretrained(str(out_dir))
    return out_dir


def perturbed_copy(model_dir: Path, out_dir: Path, *, seed: int = 7) -> Path:
    """A copy of the model with every weight matrix shifted by noise (a 'new checkpoint')."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(str(model_dir))
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn(param.shape, generator=gen) * 0.05)
    model.save_pretrained(str(out_dir))
    AutoTokenizer.from_pretrained(str(model_dir)).save_pretrained(str(out_dir))
    return out_dir
