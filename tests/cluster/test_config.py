"""The ``cluster:`` section: validated strictly, options without effect refused, and
``fulmen runner --ray`` hands each runner the options it was given."""

from __future__ import annotations

from pathlib import Path

import pytest

from fulmen.cli.main import build_parser
from fulmen.cli.runner import _forwarded  # pyright: ignore[reportPrivateUsage]
from fulmen.cluster import ClusterConfig
from fulmen.cluster.runners import _summary  # pyright: ignore[reportPrivateUsage]
from fulmen.errors import ConfigError
from fulmen.trainer.config import load_config

TOY = Path(__file__).resolve().parents[2] / "examples" / "toy" / "config.yaml"


def _load(*overrides: str) -> object:
    return load_config(TOY, overrides=list(overrides))


def test_the_toy_config_has_no_cluster_and_a_ray_section_is_read() -> None:
    assert load_config(TOY).cluster is None  # the local path stays the default
    config = load_config(
        TOY, overrides=["cluster={backend: ray, runners: 3, engine_replicas: 2, engine_gpus: 1}"]
    )
    assert config.cluster == ClusterConfig(
        backend="ray", runners=3, engine_replicas=2, engine_gpus=1.0
    )
    assert config.cluster.address == "auto"


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ("{backend: slurm}", "backend"),
        ("{runners: 2}", "backend"),
        ("{backend: ray, runner: 2}", "runner"),  # a typo is not ignored
        ("{backend: ray, runners: 0}", "runners"),
        ("{backend: ray, engine_cpus: 0}", "engine_cpus"),
        ("{backend: ray, address: 'ray://head:10001'}", "Ray Client is not supported"),
        ("{backend: ray, address: head}", "HOST:PORT"),
        ("{backend: ray, max_restarts: -2}", "max_restarts"),
    ],
)
def test_bad_cluster_sections_are_refused(section: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        _load(f"cluster={section}")


def test_options_without_effect_are_refused() -> None:
    with pytest.raises(ConfigError, match=r"engine_replicas has no effect with engine\.kind"):
        _load(
            "engine={kind: endpoint, url: 'http://127.0.0.1:9/v1'}",
            "algorithm=apo",
            "cluster={backend: ray, engine_replicas: 2}",
        )
    with pytest.raises(ConfigError, match="store_cpus has no effect"):
        _load("store_url=http://127.0.0.1:4747", "cluster={backend: ray, store_cpus: 1}")
    # An endpoint engine with runners on Ray is fine: only the engine options are dead there.
    _load(
        "engine={kind: endpoint, url: 'http://127.0.0.1:9/v1'}",
        "algorithm=apo",
        "cluster={backend: ray, runners: 2}",
    )


def _runner_args(*argv: str) -> list[str]:
    args = build_parser().parse_args(["runner", *argv])
    return _forwarded(args.runner_parser, args)


def test_runner_ray_forwards_every_given_option_but_its_own() -> None:
    forwarded = _runner_args(
        "--ray", "4", "--ray-address", "10.0.0.1:6379", "--store", "http://h:1",
        "--token", "secret", "--agent", "pkg.mod:agent", "--concurrency", "3",
        "--mode", "train", "--mode", "val", "--until-idle", "--worker-id", "w",
        "--gateway", "http://g:2", "--gateway-api-key", "key",
    )  # fmt: skip
    assert forwarded == [
        "--agent", "pkg.mod:agent", "--concurrency", "3", "--gateway", "http://g:2",
        "--mode", "train", "--mode", "val", "--until-idle",
    ]  # fmt: skip
    assert "secret" not in forwarded and "key" not in forwarded  # tokens go in the env


def test_ray_options_need_ray() -> None:
    args = build_parser().parse_args(["runner", "--agent", "a:b", "--ray-address", "h:1"])
    with pytest.raises(ConfigError, match="without --ray N"):
        args.func(args)


def test_runner_summary_sums_the_runners_counts() -> None:
    summary = _summary(
        [
            {"name": "r0", "last_line": '{"worker_id": "a", "claimed": 2, "succeeded": 2}'},
            {"name": "r1", "last_line": '{"worker_id": "b", "claimed": 3, "succeeded": 1}'},
            {"name": "r2", "last_line": None},
        ],
        restarts=1,
        failure=None,
    )
    assert summary["runners"] == 3 and summary["restarts"] == 1
    assert summary["claimed"] == 5 and summary["succeeded"] == 3
    assert summary["workers"][2] == {"name": "r2"}


def test_engine_dtype_reaches_either_engine_kind(tmp_path: Path) -> None:
    """``engine.dtype`` is vLLM's ``--dtype`` too (a replica's command and the local launcher)."""
    from fulmen.cluster.specs import engine_spec
    from fulmen.engines.config import EngineConfig

    config = load_config(TOY, overrides=["engine={kind: vllm, dtype: bfloat16}"])
    assert config.engine.dtype == "bfloat16"
    for kind in ("vllm", "builtin"):
        spec = engine_spec(
            EngineConfig(kind=kind, dtype="bfloat16"),  # type: ignore[arg-type]
            name="e",
            model="tiny",
            port=1,
            threads=1,
            log_dir=tmp_path,
            board="b",
        )
        args = list(spec.args)
        assert args[args.index("--dtype") + 1] == "bfloat16", args
