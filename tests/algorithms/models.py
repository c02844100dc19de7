"""Tiny causal LMs built from a config: random weights, a small vocabulary, deterministic."""

from __future__ import annotations

import torch
from transformers import Gemma3ForCausalLM, Gemma3TextConfig, LlamaConfig, LlamaForCausalLM


def tiny_llama(
    *, seed: int = 0, vocab: int = 64, init: float = 0.02, hidden: int = 32
) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=128,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        initializer_range=init,
    )
    return LlamaForCausalLM(config).eval()


def tiny_gemma3(*, seed: int = 0, vocab: int = 64) -> Gemma3ForCausalLM:
    """Gemma 3 text model: tied embeddings, scaled embeddings, logit soft-capping turned on."""
    torch.manual_seed(seed)
    config = Gemma3TextConfig(
        vocab_size=vocab,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        max_position_embeddings=128,
        sliding_window=4,
        final_logit_softcapping=3.0,
        initializer_range=0.5,
        pad_token_id=0,
    )
    return Gemma3ForCausalLM(config).eval()
