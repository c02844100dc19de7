"""One LoRA adapter per role on one base model: each role's step touches only its adapter."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from fulmen.algorithms.grpo import GRPOConfig
from fulmen.algorithms.grpo.role_policies import RolePolicies
from fulmen.algorithms.grpo.roles import check_adapters, role_of, split_by_role
from fulmen.algorithms.grpo.samples import build_samples
from fulmen.algorithms.policy import load_adapter_weights
from fulmen.types import LLMResource

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


def test_calls_without_an_agent_name_train_no_adapter_even_under_a_catch_all() -> None:
    """Issue 46, item 1: the gateway serves a call that carried no agent name from the base
    model, so a catch-all role must not train it (its logprobs are the base model's).

    Two rollouts of one task, each a ``check_query`` call and an unnamed call (3 tokens each):
    the catch-all role ``other`` trains on the two ``check_query`` calls (6 tokens, advantages
    +-0.7071), not on four calls (12 tokens) as before.
    """
    adapters = {"writer": ["write_query"], "other": ["*"]}
    routes = {"write_query": "policy-writer-1", "*": "policy-other-1"}
    llm = LLMResource(base_url="http://e/v1", model="tiny", agent_models=routes)
    assert llm.model_for(None) == "tiny" and llm.model_for("check_query") == "policy-other-1"
    assert role_of(None, adapters) is None  # as the gateway routed it
    assert role_of("check_query", adapters) == "other"
    batch = [
        transition(None, rollout, [1, 2], [5, 6, 7], reward, call_index=k, agent_name=agent)
        for rollout, reward in (("r0", 1.0), ("r1", 0.0))
        for k, agent in enumerate(("check_query", None))
    ]
    parts, unrouted = split_by_role(batch, adapters)
    assert parts["writer"] == [] and unrouted == 2
    assert [(t.rollout_id, t.agent_name) for t in parts["other"]] == [
        ("r0", "check_query"),
        ("r1", "check_query"),
    ]
    samples, stats = build_samples(parts["other"], config=GRPOConfig())
    assert (stats.transitions, stats.trained_tokens) == (2, 6)
    assert [s.advantages[0] for s in samples] == pytest.approx([0.70710, -0.70710], abs=1e-4)


def test_a_pattern_two_adapters_name_is_refused() -> None:
    """The gateway's routes map a pattern once (the later adapter's model), while training
    gives its calls to the first adapter that names it: two adapters, one call, no match."""
    with pytest.raises(ValueError, match=r"'\*' is named by both 'a' and 'b'"):
        check_adapters({"a": ["write_query", "*"], "b": ["*"]})


async def test_the_role_loop_counts_the_unnamed_calls_it_leaves_out() -> None:
    from fulmen.algorithms.grpo.config import GRPOAlgorithmConfig
    from fulmen.algorithms.grpo.diagnose import no_update_reason
    from fulmen.algorithms.grpo.role_loop import RoleGRPOLoop

    policies = _policies()
    loop = RoleGRPOLoop(GRPOAlgorithmConfig(adapters=ADAPTERS), None)  # type: ignore[arg-type]
    loop.updater = policies
    named = _batch(policies, "write_query", seed=8)
    unnamed = [
        t.model_copy(update={"agent_name": None, "rollout_id": f"u{i}"})
        for i, t in enumerate(_batch(policies, "write_query", seed=9))
    ]
    metrics = await loop.update(0, named + unnamed)
    assert (metrics["transitions"], metrics["dropped_unrouted"]) == (4.0, 4.0)
    assert metrics["writer/transitions"] == 4.0 and metrics["writer/updated"] == 1.0
    alone = await loop.update(1, unnamed)
    assert (alone["updated"], alone["transitions"], alone["dropped_unrouted"]) == (0.0, 0.0, 4.0)
    assert "4 transitions came from calls that carried no agent name" in no_update_reason(alone)
