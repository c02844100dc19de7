"""The VERL config translation: a typical 0.x config reported key by key, and its refusals."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import fulmen.compat.agentlightning as agl
from fulmen.compat.agentlightning.__main__ import main
from fulmen.compat.agentlightning.verl_config import translate_verl_config


def typical() -> dict[str, Any]:
    """A VERL config with the sections and values 0.x's GRPO examples used."""
    return {
        "algorithm": {"adv_estimator": "grpo", "use_kl_in_reward": False},
        "data": {"train_batch_size": 32, "max_prompt_length": 4096, "max_response_length": 2048},
        "actor_rollout_ref": {
            "rollout": {
                "tensor_model_parallel_size": 1,
                "n": 4,
                "log_prob_micro_batch_size_per_gpu": 4,
                "multi_turn": {"format": "hermes"},
                "name": "vllm",
                "gpu_memory_utilization": 0.6,
            },
            "actor": {
                "ppo_mini_batch_size": 32,
                "ppo_micro_batch_size_per_gpu": 4,
                "optim": {"lr": 1e-6},
                "use_kl_loss": False,
                "kl_loss_coef": 0.0,
                "entropy_coeff": 0,
                "clip_ratio_low": 0.2,
                "clip_ratio_high": 0.3,
                "fsdp_config": {"param_offload": True, "optimizer_offload": True},
            },
            "ref": {"log_prob_micro_batch_size_per_gpu": 8, "fsdp_config": {"param_offload": True}},
            "model": {
                "path": "Qwen/Qwen2.5-1.5B-Instruct",
                "use_remove_padding": True,
                "enable_gradient_checkpointing": True,
            },
        },
        "trainer": {
            "n_gpus_per_node": 1,
            "val_before_train": True,
            "critic_warmup": 0,
            "logger": ["console", "wandb"],
            "project_name": "AgentLightning",
            "experiment_name": "calc_x",
            "nnodes": 1,
            "save_freq": 64,
            "test_freq": 32,
            "total_epochs": 2,
        },
    }


def test_typical_config_report_key_by_key() -> None:
    report = translate_verl_config(typical())
    status = {e.key: e.status for e in report.entries}
    assert len(status) == 36  # every leaf key, none left out
    assert status["algorithm.adv_estimator"] == "honoured"
    assert status["actor_rollout_ref.actor.optim.lr"] == "translated"
    assert status["actor_rollout_ref.rollout.gpu_memory_utilization"] == "refused"
    assert report.blocking() == []
    assert report.counts() == {"honoured": 9, "translated": 14, "refused": 13}
    assert report.overrides == {
        "algorithm.tasks_per_step": 32,
        "algorithm.grpo.max_seq_len": 6144,
        "rollouts.train_sampling.max_tokens": 2048,
        "rollouts.val_sampling.max_tokens": 2048,
        "algorithm.group_size": 4,
        "algorithm.grpo.micro_batch_tokens": 4 * 6144,
        "algorithm.grpo.learning_rate": 1e-6,
        "algorithm.grpo.kl_coef": 0.0,
        "algorithm.grpo.clip_low": 0.2,
        "algorithm.grpo.clip_high": 0.3,
        "model": "Qwen/Qwen2.5-1.5B-Instruct",
        "algorithm.grpo.gradient_checkpointing": True,
        "validation.every": 32,
        "algorithm.checkpoint_every": 64,
        "algorithm.grpo.finetune": "full",  # no lora_rank: VERL trained every weight
    }
    assert report.steps_for(100) == 2 * 4  # two epochs of ceil(100 / 32) steps
    assert "0 blocking" in report.render()


def test_refusals_that_change_learning_block_verl() -> None:
    config = typical()
    config["algorithm"]["adv_estimator"] = "gae"
    config["actor_rollout_ref"]["actor"]["entropy_coeff"] = 0.01
    config["actor_rollout_ref"]["actor"]["ppo_mini_batch_size"] = 8
    config["trainer"]["made_up_key"] = 1
    blocking = {e.key for e in translate_verl_config(config).blocking()}
    assert blocking == {
        "algorithm.adv_estimator",
        "actor_rollout_ref.actor.entropy_coeff",
        "actor_rollout_ref.actor.ppo_mini_batch_size",
        "trainer.made_up_key",
    }
    with pytest.raises(agl.NotSupported, match="adv_estimator"):
        agl.VERL(config)


def test_verl_sections_reach_fulmen() -> None:
    config = typical()
    config["actor_rollout_ref"]["actor"].update(use_kl_loss=True, kl_loss_coef=0.01)
    config["actor_rollout_ref"]["model"].update(lora_rank=16, lora_alpha=32)
    verl = agl.VERL(config)
    section = verl.fulmen_section()
    assert section["grpo"]["kl_coef"] == 0.01
    assert section["grpo"]["lora"] == {"r": 16, "alpha": 32.0}
    assert "finetune" not in section["grpo"]
    assert verl.top_level()["rollouts"]["train_sampling"] == {"max_tokens": 2048}


def test_report_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "verl.json"
    path.write_text(json.dumps(typical()))
    assert main(["verl-report", str(path)]) == 0
    out = capsys.readouterr().out
    assert "actor_rollout_ref.actor.optim.lr" in out and "algorithm.grpo.learning_rate" in out
    bad = typical()
    bad["algorithm"]["use_kl_in_reward"] = True
    path.write_text(json.dumps(bad))
    assert main(["verl-report", str(path)]) == 1
    assert "REFUSED!" in capsys.readouterr().out
