"""The ``tiny`` model: a 2-layer random-weight Llama with a locally trained tokenizer.

Everything is derived from constants in this file, so two builds on any machine give the same
tokenizer and bit-identical weights: a byte-level BPE (any text encodes) trained on a corpus
generated from a fixed seed, ChatML special tokens, Hermes ``<tool_call>`` tokens, and a model
initialised with ``torch.manual_seed(SEED)``. Head size 32 keeps it servable by vLLM on CPU.
Bump ``RECIPE_VERSION`` whenever anything here changes, so stale caches are not reused.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from fulmen.engines.models.chat_templates import CHATML_TEMPLATE

__all__ = [
    "RECIPE_VERSION",
    "SEED",
    "SPECIAL_TOKENS",
    "TOOL_TOKENS",
    "build",
    "build_tokenizer",
    "corpus",
    "save_seeded",
    "shared_settings",
    "special_ids",
]

RECIPE_VERSION = "v1"
SEED = 1234
VOCAB_SIZE = 1024
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
#: Added as ordinary (non-special) tokens so they survive decoding, as in Qwen 2.5.
TOOL_TOKENS = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]

_WORD_TEXT = (
    "the a an of to and in is it you that he was for on are with as his they be at one have "
    "this from or had by word but what some we can out other were all there when up use your "
    "how said each she which do their time if will way about many then them write would like so "
    "these her long make thing see him two has look more day could go come did number sound no "
    "most people my over know water than call first who may down side been now find any new "
    "work part take get place made live where after back little only round man year came show "
    "every good me give our under name very through just form sentence great think say help low "
    "line differ turn cause much mean before move right boy old too same tell does set three "
    "want air well also play small end put home read hand port large spell add even land here "
    "must big high such follow act why ask men change went light kind off need house picture "
    "try us again animal point mother world near build self earth father answer question tool "
    "call function result error query table select from where sum count total"
)
_WORDS = tuple(_WORD_TEXT.split())


def corpus(n_lines: int = 4000) -> list[str]:
    """Generate the tokenizer's training text: sentences, arithmetic, JSON and code-like lines."""
    rng = random.Random(SEED)
    lines: list[str] = []
    for i in range(n_lines):
        kind = i % 4
        if kind == 0:
            words = rng.choices(_WORDS, k=rng.randint(4, 14))
            lines.append(" ".join(words).capitalize() + rng.choice([".", "?", "!"]))
        elif kind == 1:
            a, b = rng.randint(0, 999), rng.randint(0, 999)
            op = rng.choice(["+", "-", "*"])
            lines.append(f"{a} {op} {b} = {eval(f'{a}{op}{b}')}")
        elif kind == 2:
            key, word = rng.choice(_WORDS), rng.choice(_WORDS)
            lines.append(f'{{"name": "{word}", "arguments": {{"{key}": {rng.randint(0, 99)}}}}}')
        else:
            lines.append(f"SELECT {rng.choice(_WORDS)} FROM t{rng.randint(0, 9)};")
    return lines


def build_tokenizer(target: Path, *, max_length: int = 4096) -> None:
    """Train the tiny tokenizer and save it, with the ChatML template, to ``target``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE - len(TOOL_TOKENS),
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=SPECIAL_TOKENS[1:],
    )
    fast.add_tokens(TOOL_TOKENS)
    fast.chat_template = CHATML_TEMPLATE
    fast.model_max_length = max_length
    fast.save_pretrained(str(target))


def build(target: Path) -> None:
    """Write the tiny model (config, weights, tokenizer, chat template) to ``target``."""
    from transformers import LlamaConfig, LlamaForCausalLM

    build_tokenizer(target)
    vocab, eos = special_ids(target)
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        max_position_embeddings=4096,
        **shared_settings(eos),
    )
    save_seeded(LlamaForCausalLM, config, eos, target)


def special_ids(target: Path) -> tuple[int, list[int]]:
    """Return the vocabulary size and the ids of ``<|im_end|>`` and ``<|endoftext|>``."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(target))
    return len(tokenizer), tokenizer.convert_tokens_to_ids(["<|im_end|>", "<|endoftext|>"])


def shared_settings(eos: list[int]) -> dict[str, Any]:
    """Return the config settings every tiny model shares: tied embeddings, float32, its tokens."""
    return {
        "initializer_range": 0.15,  # peaked logits: greedy decoding is stable, not near-ties
        "tie_word_embeddings": True,
        "bos_token_id": eos[1],
        "eos_token_id": eos,
        "pad_token_id": eos[1],
        "dtype": "float32",
    }


def save_seeded(model_class: Any, config: Any, eos: list[int], target: Path) -> None:
    """Initialise ``model_class(config)`` from ``SEED`` and save it to ``target``."""
    import torch
    from transformers import GenerationConfig

    torch.manual_seed(SEED)
    model = model_class(config).eval()
    model.generation_config = GenerationConfig(eos_token_id=eos, pad_token_id=eos[1])
    model.save_pretrained(str(target), safe_serialization=True)
