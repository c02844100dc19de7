r"""``fulmen runner``: claim rollouts from a store and run an agent on them.

::

    fulmen runner --store http://127.0.0.1:4747 --agent my_pkg.agent:solve \
        --concurrency 8 --gateway http://127.0.0.1:8100
    fulmen runner --store http://127.0.0.1:4747 --gateway http://127.0.0.1:8100 \
        --command 'node agent.js --question "${task.question}"' --verifier 'python check.py'

SIGTERM or Ctrl-C stops claiming, lets running rollouts finish for ``--shutdown-grace``
seconds and releases the rest to the queue. On exit it prints one JSON line of counts.

``--ray N`` starts N such runners as actors on a running Ray cluster (``--ray-address``,
default ``auto``) and stops them on SIGTERM or Ctrl-C; see docs/cluster.md.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any, cast

from fulmen.errors import ConfigError
from fulmen.types import Mode

__all__ = ["register"]


def register(subparsers: Any) -> None:
    """Add the ``runner`` subcommand."""
    from fulmen.agent.config import RunnerConfig
    from fulmen.cli.store import add_store_options

    fields = RunnerConfig.model_fields

    def default(name: str) -> Any:
        return fields[name].default

    parser: argparse.ArgumentParser = subparsers.add_parser(
        "runner",
        help="claim rollouts from a store and run an agent on them",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_store_options(parser)
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--agent", help="the agent as module:object")
    which.add_argument(
        "--command",
        help="a program run per rollout, as a shell would split it (no shell runs it); "
        "templated: '${task.question}' passes a task field (docs/command-agents.md)",
    )
    which.add_argument(
        "--command-config",
        help="a command agent's full settings: a YAML/JSON file, or JSON inline "
        "(the training config's agent: mapping)",
    )
    which.add_argument(
        "--agent-spec",
        help="an agent given as a mapping of any kind, as inline JSON with its kind "
        '(\'{"kind": "NAME", ...}\', the training config\'s agent: mapping); what fulmen '
        "passes to the runners it starts for an agent kind a package adds",
    )
    parser.add_argument(
        "--verifier", help="with --command: a program run after it that decides the reward"
    )
    parser.add_argument(
        "--verifier-reward",
        choices=["exit_code", "json"],
        help="with --verifier: exit code 0 scores 1 (default), or its last JSON line",
    )
    parser.add_argument(
        "--command-timeout", type=float, help="with --command: seconds before it is killed"
    )
    parser.add_argument(
        "--sandbox",
        choices=["auto", "bwrap", "process"],
        help="with --command: the sandbox backend (default auto: bubblewrap when installed)",
    )
    parser.add_argument(
        "--concurrency", type=int, default=default("concurrency"), help="rollouts run at once"
    )
    parser.add_argument("--gateway", help="gateway base URL the llm resource points at")
    parser.add_argument(
        "--gateway-api-key",
        help="key agents send to the gateway (default: $FULMEN_GATEWAY_TOKEN, else $FULMEN_TOKEN)",
    )
    parser.add_argument("--worker-id", help="id in the store (default: host-pid-random)")
    parser.add_argument(
        "--mode", action="append", choices=[m.value for m in Mode], help="claim only these modes"
    )
    _add_tuning_options(parser, default)
    _add_ray_options(parser)
    parser.set_defaults(func=_run, runner_parser=parser)


def _add_ray_options(parser: argparse.ArgumentParser) -> None:
    ray = parser.add_argument_group("Ray (docs/cluster.md)")
    ray.add_argument(
        "--ray",
        type=int,
        metavar="N",
        help="start N runners as actors on a running Ray cluster instead of one here; each "
        "gets these options and a worker id ending in its number",
    )
    ray.add_argument(
        "--ray-address",
        default=None,
        metavar="ADDRESS",
        help="the Ray cluster: auto (the one on this machine) or HOST:PORT (default: auto)",
    )
    ray.add_argument(
        "--ray-cpus",
        type=float,
        default=None,
        metavar="CPUS",
        help="CPUs each runner actor asks Ray for (default: 1)",
    )


def _add_tuning_options(parser: argparse.ArgumentParser, default: Any) -> None:
    parser.add_argument(
        "--sync-isolation",
        choices=["process", "thread"],
        default=default("sync_isolation"),
        help="where sync agents run: process (killable on timeout) or thread",
    )
    parser.add_argument(
        "--async-isolation",
        choices=["thread", "loop"],
        default=default("async_isolation"),
        help="where async agents run: thread (own event loop; a blocking or uncooperative agent "
        "is abandoned at its timeout) or loop (the runner's loop)",
    )
    parser.add_argument(
        "--store-retry-s",
        type=float,
        default=default("store_retry_s"),
        metavar="SECONDS",
        help="keep retrying a store that is down or answers 5xx this long, then exit "
        "(default: retry as long as the runner runs, logging once a minute)",
    )
    parser.add_argument(
        "--store-retry-max-delay",
        type=float,
        default=default("store_retry_max_delay"),
        metavar="SECONDS",
        help="longest pause between those retries (default: %(default)s)",
    )
    parser.add_argument(
        "--span-buffer-max",
        type=int,
        default=default("span_buffer_max"),
        help="spans held in memory while the store is away; more are spilled to a file in "
        "$FULMEN_SPILL_DIR and replayed when it is back (default: %(default)s)",
    )
    parser.add_argument(
        "--heartbeat-interval", type=float, default=default("heartbeat_interval"), help="seconds"
    )
    parser.add_argument(
        "--poll-interval",
        type=float,
        default=default("poll_interval"),
        help="seconds between claims while the queue is empty",
    )
    parser.add_argument(
        "--shutdown-grace",
        type=float,
        default=default("shutdown_grace_s"),
        help="seconds running rollouts may finish after SIGTERM before they are released",
    )
    parser.add_argument(
        "--instrument",
        action="append",
        metavar="FRAMEWORK",
        help="OpenInference instrumentation to activate (repeatable; default: those of the "
        "frameworks the agent module imports)",
    )
    parser.add_argument(
        "--no-instrument", action="store_true", help="activate no OpenInference instrumentation"
    )
    parser.add_argument("--max-rollouts", type=int, help="exit after claiming this many")
    parser.add_argument(
        "--until-idle", action="store_true", help="exit when the queue is empty and all finished"
    )


def _run(args: argparse.Namespace) -> int:
    if args.ray is not None:
        return _run_on_ray(args)
    if args.ray_address is not None or args.ray_cpus is not None:
        raise ConfigError("--ray-address and --ray-cpus have no effect without --ray N")
    # Like ``python -m``: agents in the current directory are importable.
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    from fulmen.cli.store import run_async

    return run_async(lambda: _main(args))


#: Options not handed on to the runners of ``--ray`` as they are: the store and tokens are
#: resolved here, each runner gets its own worker id.
_NOT_FORWARDED = frozenset(
    {"help", "store", "token", "gateway_api_key", "worker_id", "ray", "ray_address", "ray_cpus"}
)


def _run_on_ray(args: argparse.Namespace) -> int:
    from fulmen.cli.store import cli_settings, store_address
    from fulmen.cluster.runners import run_ray_runners
    from fulmen.store.urls import is_in_memory

    if args.ray < 1:
        raise ConfigError(f"--ray needs at least 1 runner, got {args.ray}")
    url, token = store_address(args)
    if is_in_memory(url):
        raise ConfigError("--ray: an in-memory store cannot be shared with runners on Ray")
    return run_ray_runners(
        count=args.ray,
        address=args.ray_address or "auto",
        cpus=args.ray_cpus if args.ray_cpus is not None else 1.0,
        args=["--store", url, *_forwarded(args.runner_parser, args)],
        store_token=token,
        gateway_token=args.gateway_api_key or cli_settings(args).gateway_token,
        worker_id=args.worker_id,
        exits_when_done=args.until_idle or args.max_rollouts is not None,
        grace_s=args.shutdown_grace + 15.0,
    )


def _forwarded(parser: argparse.ArgumentParser, args: argparse.Namespace) -> list[str]:
    """Rebuild the command-line options of ``args`` that differ from their defaults."""
    out: list[str] = []
    for action in parser._actions:  # the parser's own options, in the order they were added
        if not action.option_strings or action.dest in _NOT_FORWARDED:
            continue
        value = getattr(args, action.dest, None)
        if value is None or value == action.default:
            continue
        flag = next((o for o in action.option_strings if o.startswith("--")), action.dest)
        if action.nargs == 0:  # a flag (store_true)
            out.append(flag)
        elif isinstance(value, list):  # an appended option, once per value
            for item in cast("list[Any]", value):
                out += [flag, str(item)]
        else:
            out += [flag, str(value)]
    return out


def _agent(args: argparse.Namespace) -> Any:
    """Return the agent to run: ``--agent`` as given, or a command agent's config."""
    from fulmen.agent.command.config import CommandAgentConfig

    command_only = ("verifier", "verifier_reward", "command_timeout", "sandbox")
    if args.command is None:
        given = [f"--{name.replace('_', '-')}" for name in command_only if getattr(args, name)]
        if given:
            raise ConfigError(f"{', '.join(given)} need --command")
    if args.agent is not None:
        return args.agent
    if args.agent_spec is not None:
        return _agent_spec(args.agent_spec)
    if args.command_config is not None:
        return _command_config(args.command_config)
    raw: dict[str, Any] = {"command": args.command}
    if args.verifier is not None:
        raw["verifier"] = {"command": args.verifier}
        if args.verifier_reward is not None:
            raw["verifier"]["reward"] = args.verifier_reward
    elif args.verifier_reward is not None:
        raise ConfigError("--verifier-reward needs --verifier")
    if args.command_timeout is not None:
        raw["timeout_s"] = args.command_timeout
    if args.sandbox is not None:
        raw["sandbox"] = {"backend": args.sandbox}
        if args.sandbox == "process":  # it cannot restrict the network; say so by choosing it
            raw["sandbox"]["network"] = "host"
    return _validated(CommandAgentConfig.model_validate, raw, "--command")


def _command_config(value: str) -> Any:
    """Read ``--command-config``: inline JSON, or a YAML/JSON file (paths relative to it)."""
    import yaml

    from fulmen.agent.command.config import CommandAgentConfig

    if value.lstrip().startswith("{"):
        try:
            raw = json.loads(value)
        except ValueError as exc:
            raise ConfigError(f"--command-config is not valid JSON: {exc}") from None
    else:
        path = Path(value)
        try:
            raw = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError) as exc:
            raise ConfigError(f"cannot read --command-config {path}: {exc}") from exc
        if isinstance(raw, dict) and isinstance(raw.get("agent"), dict):
            raw = raw["agent"]  # a training config: its agent
        if isinstance(raw, dict):
            raw.setdefault("config_dir", str(path.parent.resolve()))
    if not isinstance(raw, dict):
        raise ConfigError("--command-config must hold a mapping (command: [...], ...)")
    return _validated(CommandAgentConfig.model_validate, raw, "--command-config")


def _agent_spec(value: str) -> Any:
    """Read ``--agent-spec``: an agent mapping of any registered kind, as inline JSON."""
    from pydantic import TypeAdapter

    from fulmen.agent.kinds import spec_union

    try:
        raw = json.loads(value)
    except ValueError as exc:
        raise ConfigError(f"--agent-spec is not valid JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise ConfigError('--agent-spec must hold a mapping ({"kind": ..., ...})')
    return _validated(TypeAdapter(spec_union()).validate_python, raw, "--agent-spec")


def _validated(validate: Any, raw: dict[str, Any], what: str) -> Any:
    """Return ``validate(raw)`` (a model's ``model_validate``), its errors as a ``ConfigError``."""
    from pydantic import ValidationError

    try:
        return validate(raw)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or 'value'}: {err['msg']}"
            for err in exc.errors()
        )
        raise ConfigError(f"{what}: {problems}") from None


async def _main(args: argparse.Namespace) -> int:
    from fulmen.agent.config import RunnerConfig
    from fulmen.agent.runner import Runner
    from fulmen.cli.store import cli_settings, store_address, store_options
    from fulmen.store import open_store
    from fulmen.tracing.backoff import Backoff, retry_call

    settings = cli_settings(args)
    options: dict[str, Any] = {
        "concurrency": args.concurrency,
        "gateway_url": args.gateway,
        "gateway_api_key": args.gateway_api_key or settings.gateway_token,
        "modes": [Mode(m) for m in args.mode] if args.mode else None,
        "sync_isolation": args.sync_isolation,
        "async_isolation": args.async_isolation,
        "store_retry_s": args.store_retry_s,
        "store_retry_max_delay": args.store_retry_max_delay,
        "span_buffer_max": args.span_buffer_max,
        "heartbeat_interval": args.heartbeat_interval,
        "poll_interval": args.poll_interval,
        "shutdown_grace_s": args.shutdown_grace,
        "frameworks": [] if args.no_instrument else args.instrument,
        "spill_dir": settings.spill_dir,
    }
    if args.worker_id:
        options["worker_id"] = args.worker_id
    config = RunnerConfig(**options)
    url, token = store_address(args)
    # A store that is down or failing when the runner starts is waited for, like one that
    # fails later; a wrong token or URL (4xx, config) fails at once.
    backoff = Backoff(maximum=config.store_retry_max_delay, deadline=config.store_retry_s)
    store = await retry_call(
        lambda: open_store(url, **store_options(url, token)),
        backoff=backoff,
        what=f"connect to the store at {url}",
    )
    try:
        runner = Runner(store, _agent(args), config)
        runner.install_signal_handlers()
        stats = await runner.run(max_rollouts=args.max_rollouts, until_idle=args.until_idle)
    finally:
        await store.aclose()
    print(json.dumps({"worker_id": runner.worker_id, **asdict(stats)}), flush=True)
    return 0
