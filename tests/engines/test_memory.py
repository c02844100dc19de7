"""The engine's memory plan: KV layout, budgets and one prefill chunk, against the real engine."""

from __future__ import annotations

from pathlib import Path

import torch

from fulmen.attention import register
from fulmen.engines.builtin.model import ServedModel
from fulmen.engines.config import EngineConfig
from fulmen.engines.memory import VLLM_CPU_KV_BYTES, plan_engine
from fulmen.meta_memory import LiveBytes

MIB = 1 << 20


def test_builtin_budgets_follow_the_engine_settings(tiny_dir: Path) -> None:
    served = ServedModel(tiny_dir, served_name="tiny")
    plan = plan_engine(EngineConfig(), tiny_dir)
    assert plan is not None
    # the real engine's KV layout: 2 layers x keys and values x 2 heads x 32 x float32
    assert plan.kv_bytes_per_token == served.kv_shape.bytes_per_token == 2 * 2 * 2 * 32 * 4
    assert plan.context == served.max_model_len == 4096
    weights = sum(p.numel() * p.element_size() for p in served.base.parameters())
    assert plan.weights_bytes == weights
    # defaults: max_batch whole contexts of KV; a prefix cache of 512 MiB or one context
    assert plan.kv_bytes == 8 * 4096 * plan.kv_bytes_per_token
    assert plan.prefix_cache_bytes == 512 * MIB
    assert plan.fixed_bytes == plan.weights_bytes + 512 * MIB + plan.prefill_bytes
    assert plan.peak_bytes == plan.fixed_bytes + plan.kv_bytes
    sized = plan_engine(
        EngineConfig(kv_cache_mb=64, prefix_cache_mb=32, dtype="bfloat16"), tiny_dir
    )
    assert sized is not None
    assert (sized.kv_bytes, sized.prefix_cache_bytes) == (64 * MIB, 32 * MIB)
    assert sized.weights_bytes * 2 == plan.weights_bytes
    assert sized.kv_bytes_per_token * 2 == plan.kv_bytes_per_token
    off = plan_engine(EngineConfig(prefix_cache=False), tiny_dir)
    assert off is not None and off.prefix_cache_bytes == 0


def test_prefill_chunk_is_what_the_real_forward_holds(tiny_dir: Path) -> None:
    plan = plan_engine(EngineConfig(prefill_chunk_tokens=1024), tiny_dir)
    assert plan is not None
    served = ServedModel(tiny_dir, served_name="tiny")
    model = served.base
    model.set_attn_implementation(register())
    ids = torch.randint(0, 1000, (1, 1024))
    with torch.no_grad(), LiveBytes() as live:
        hidden = model.get_decoder()(
            input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=False
        ).last_hidden_state
        model.get_output_embeddings()(hidden[:, -1:])
    assert abs(plan.prefill_bytes - live.peak) <= 0.05 * live.peak, (plan.prefill_bytes, live.peak)


def test_vllm_takes_its_kv_space_at_start_and_endpoint_needs_nothing(tiny_dir: Path) -> None:
    plan = plan_engine(EngineConfig(kind="vllm"), tiny_dir)
    assert plan is not None and plan.kv_allocated_at_start
    assert plan.kv_bytes == VLLM_CPU_KV_BYTES
    assert plan.fixed_bytes == plan.peak_bytes == plan.weights_bytes + VLLM_CPU_KV_BYTES
    half = plan_engine(EngineConfig(kind="vllm", dtype="bfloat16"), tiny_dir)
    assert half is not None and half.weights_bytes * 2 == plan.weights_bytes
    assert plan_engine(EngineConfig(kind="endpoint", url="http://127.0.0.1:9/v1"), tiny_dir) is None
