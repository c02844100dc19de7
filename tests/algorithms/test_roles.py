"""One LoRA adapter per role on one base model: each role's step touches only its adapter."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from fulmen.algorithms.grpo import GRPOConfig
from fulmen.algorithms.grpo.role_policies import RolePolicies
from fulmen.algorithms.grpo.roles import role_of
from fulmen.algorithms.policy import load_adapter_weights

from .builders import transition
from .models import tiny_llama

ADAPTERS = {"writer": ["write_query"], "rewriter": ["rewrite_*"]}


def _policies(**config: object) -> RolePolicies:
    settings = GRPOConfig.model_validate({"learning_rate": 1e-2, **config})
    return RolePolicies(tiny_llama(), config=settings, adapters=ADAPTERS)


def _batch(policies: RolePolicies, agent: str, *, seed: int, rewards=(1.0, 0.0, 0.5, 0.0)):
    gen = torch.Generator().manual_seed(seed)
    model = policies.engines[role_of(agent, ADAPTERS) or "writer"].model
    out = []
    for i, reward in enumerate(rewards):
        prompt = [1, *torch.randint(3, 64, (3,), generator=gen).tolist()]
        completion = torch.randint(3, 64, (4,), generator=gen).tolist()
        out.append(
            transition(model, f"{agent}-{seed}-{i}", prompt, completion, reward, agent_name=agent)
        )
    return out


def _weights(policies: RolePolicies, marker: str) -> dict[str, torch.Tensor]:
    model = next(iter(policies.engines.values())).model
    return {n: p.detach().clone() for n, p in model.named_parameters() if marker in n}


def _same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_role_of_takes_the_first_matching_adapter() -> None:
    adapters = {"a": ["write_*"], "b": ["write_query", "rewrite_query"]}
    assert role_of("write_query", adapters) == "a"
    assert role_of("rewrite_query", adapters) == "b"
    assert role_of("check_query", adapters) is None and role_of(None, adapters) is None


def test_a_roles_step_leaves_the_other_adapter_and_the_base_bit_identical() -> None:
    policies = _policies()
    writer, rewriter = policies.engines["writer"], policies.engines["rewriter"]
    assert writer.model is rewriter.model  # one base model in memory
    optimized = [{id(p) for g in e.optimizer.param_groups for p in g["params"]} for e in (
        writer, rewriter)]  # fmt: skip
    assert optimized[0] and optimized[1] and not optimized[0] & optimized[1]
    before = {m: _weights(policies, m) for m in (".writer.", ".rewriter.", "")}
    base = {n: p for n, p in before[""].items() if "lora_" not in n}

    metrics = policies.train_step(
        _batch(policies, "write_query", seed=1) + _batch(policies, "check_query", seed=2)
    )
    assert metrics["writer"]["updated"] == 1.0 and metrics["rewriter"]["updated"] == 0.0
    assert metrics["writer"]["transitions"] == 4.0  # check_query's calls train nothing
    assert not _same(_weights(policies, ".writer."), before[".writer."])
    assert _same(_weights(policies, ".rewriter."), before[".rewriter."])
    after = {n: p for n, p in _weights(policies, "").items() if "lora_" not in n}
    assert _same(after, base)

    written = _weights(policies, ".writer.")
    metrics = policies.train_step(_batch(policies, "rewrite_query", seed=3))
    assert metrics["rewriter"]["updated"] == 1.0 and metrics["writer"]["updated"] == 0.0
    assert _same(_weights(policies, ".writer."), written)
    assert not _same(_weights(policies, ".rewriter."), before[".rewriter."])


def test_each_adapter_learns_from_its_roles_transitions_alone() -> None:
    """A mixed batch moves each adapter exactly as a batch of only its role's calls does."""
    mixed, alone = _policies(kl_coef=0.1), _policies(kl_coef=0.1)
    writes = _batch(mixed, "write_query", seed=4)
    rewrites = _batch(mixed, "rewrite_query", seed=5, rewards=(0.0, 0.0, 1.0, 1.0))
    mixed.train_step(writes + rewrites)
    alone.train_step(writes)
    assert _same(_weights(mixed, ".writer."), _weights(alone, ".writer."))
    assert not _same(_weights(mixed, ".rewriter."), _weights(alone, ".rewriter."))
    alone.train_step(rewrites)
    assert _same(_weights(mixed, ".rewriter."), _weights(alone, ".rewriter."))


def test_checkpoint_and_adapter_files_round_trip_per_role(tmp_path: Path) -> None:
    policies = _policies()
    policies.train_step(
        _batch(policies, "write_query", seed=6) + _batch(policies, "rewrite_query", seed=7)
    )
    policies.save_checkpoint(tmp_path / "ckpt")
    for name, engine in policies.engines.items():
        folder = engine.save_adapter(tmp_path / "adapters" / name)
        assert sorted(p.name for p in folder.iterdir() if p.suffix != ".md") == [
            "adapter_config.json",
            "adapter_model.safetensors",
        ]
    restored = _policies()
    restored.load_checkpoint(tmp_path / "ckpt")
    assert restored.step == 1
    for marker in (".writer.", ".rewriter."):
        assert _same(_weights(restored, marker), _weights(policies, marker))
    assert restored.engines["writer"].optimizer.state  # AdamW moments came back too

    started = _policies()
    for name, engine in started.engines.items():
        load_adapter_weights(engine.model, tmp_path / "adapters" / name, adapter_name=name)
    for marker in (".writer.", ".rewriter."):
        assert _same(_weights(started, marker), _weights(policies, marker))


def test_bad_adapter_maps_are_refused() -> None:
    for bad in ({}, {"a b": ["x"]}, {"w": []}, {"default": ["x"]}):
        with pytest.raises(ValueError):
            RolePolicies(tiny_llama(), config=GRPOConfig(), adapters=bad)


def test_per_role_runs_attribute_calls_by_the_header_that_routed_them() -> None:
    from fulmen.algorithms.grpo.config import GRPOAlgorithmConfig

    config = GRPOAlgorithmConfig(adapters={"writer": ["write_*"]})
    assert config.transition_options().names == "call"
    assert GRPOAlgorithmConfig().transition_options().names == "call_or_spans"
    with pytest.raises(ValueError, match=r"transitions\.names must be 'call'"):
        GRPOAlgorithmConfig(
            adapters={"writer": ["write_*"]}, transitions={"names": "call_or_spans"}
        )
