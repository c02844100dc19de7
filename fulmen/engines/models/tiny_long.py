"""The ``tiny-long`` model: the tiny model's tokenizer on a 2-layer Gemma 3 with 64k positions.

For tests of long prompts (32k tokens served and trained in seconds on a CPU): one
sliding-window layer and one global layer, as Gemma 3 alternates them, so the windowed and the
causal paths of long-sequence attention both run. Small on purpose (hidden size 64, two query
heads of size 16 sharing one key-value head): attention over 32k tokens is what costs. Random
weights from ``tiny.SEED``; two builds give bit-identical files. Bump ``RECIPE_VERSION``
whenever anything here changes.
"""

from __future__ import annotations

from pathlib import Path

from fulmen.engines.models.tiny import build_tokenizer, save_seeded, shared_settings, special_ids

__all__ = ["CONTEXT", "RECIPE_VERSION", "SLIDING_WINDOW", "build"]

RECIPE_VERSION = "v1"
#: Positions of the model (its context: prompt plus completion).
CONTEXT = 65536
#: Keys a sliding-window layer attends to.
SLIDING_WINDOW = 256


def build(target: Path) -> None:
    """Write the tiny-long model (config, weights, tokenizer, chat template) to ``target``."""
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    build_tokenizer(target, max_length=CONTEXT)
    vocab, eos = special_ids(target)
    config = Gemma3TextConfig(
        vocab_size=vocab,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        query_pre_attn_scalar=16,
        sliding_window=SLIDING_WINDOW,
        layer_types=["sliding_attention", "full_attention"],
        max_position_embeddings=CONTEXT,
        **shared_settings(eos),
    )
    save_seeded(Gemma3ForCausalLM, config, eos, target)
