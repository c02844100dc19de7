"""Prefix-cache hit rate of real command agents, before and after stable sandbox paths.

Claude Code, the Codex CLI and OpenCode (``--agents``; OpenCode from ``PATH``, not from
``tests/command_agents``) run their recipes from ``docs/command-agents.md`` unchanged, as
command agents in the bubblewrap sandbox (``backend: bwrap``, a user of its own per rollout),
through fulmen's runner and gateway in front of the built-in engine serving ``tiny-long`` (64k
positions: the hit rate depends on the prompts the agents send, not on the weights). Each
agent does ``--rollouts`` rollouts of one task, one after the other (concurrency 1), so every
later rollout may reuse the prefix cache its predecessors filled. The gateway sets every call's
``max_tokens`` (16) and ``temperature`` (0: greedy, so how many calls a rollout makes does not
vary by chance between the checkouts; Claude Code continues an answer cut at ``max_tokens``,
up to 4 calls a rollout).

Two checkouts in the same run: ``--before DIR`` (``git archive 43928d5^ | tar -x -C DIR``:
every rollout's directory at its own path on the host, ``/tmp/fulmen-.../work``, which the
agents put in their prompts) and this checkout (the rollout's directory at ``/home/rollout``
in every rollout). Only the runner, sandbox and gateway come from each checkout: the engine is
always this checkout's ``fulmen serve --model tiny-long`` with the same settings, started
afresh for each agent and checkout so no run finds the other's cache.

The figures are the engine's own counters (``/metrics``:
``fulmen_engine_prefix_cache_hit_tokens_total`` and ``..._miss_tokens_total``, as
``fulmen.trainer.diagnosis`` reads them), read before and after each rollout. Each agent and
checkout prints one JSON line: prompt tokens, cached tokens and the hit rate over all calls
(first rollout included), per rollout and over the rollouts after the first, the calls per
rollout, and where the first calls' prompts of rollouts 1 and 2 first differ (tokens in
common, the prompt text there, and where the whole requests differ: client metadata such as
session ids, which never reach the prompt). ``--out DIR`` keeps each run's SQLite store, the
engine's log and the rollouts' first requests there.

    git -C . archive 43928d5^ | (mkdir -p /tmp/pc-before && tar -x -C /tmp/pc-before)
    python benchmarks/prefix_cache_paths.py --before /tmp/pc-before --rollouts 4
    python benchmarks/prefix_cache_paths.py --before /tmp/pc-before --agents opencode
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
NODE_MODULES = ROOT / "tests" / "command_agents" / "node_modules"
TASK = {"prompt": "Write the word hi into hello.txt."}
MODEL = "tiny-long"

# docs/command-agents.md, "Recipes" (tests/command_agents/test_third_party_agents.py checks
# that the tests run the documented settings): the same, with the npm-installed executables.
CODEX_CONFIG = """\
model = "${model}"
model_provider = "fulmen"
sandbox_mode = "danger-full-access"
approval_policy = "never"

[analytics]
enabled = false

[model_providers.fulmen]
name = "fulmen"
base_url = "${openai_base_url}"
env_key = "OPENAI_API_KEY"
wire_api = "responses"
"""


def recipe(agent: str, bin_dir: Path) -> dict[str, Any]:
    """Return the ``agent:`` mapping of the docs' recipe for ``agent`` (claude-code, codex)."""
    if agent == "claude-code":
        return {
            "command": [
                str(bin_dir / "claude"),
                "-p",
                "${task.prompt}",
                "--model",
                "${model}",
                "--output-format",
                "json",
                "--allowedTools",
                "Bash",
                "Write",
                "Read",
            ],
            "env": {
                "ANTHROPIC_MODEL": "${model}",
                "ANTHROPIC_DEFAULT_HAIKU_MODEL": "${model}",
                "ANTHROPIC_DEFAULT_SONNET_MODEL": "${model}",
                "ANTHROPIC_DEFAULT_OPUS_MODEL": "${model}",
                "CLAUDE_CONFIG_DIR": "${home}/.claude",
                "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
                "DISABLE_TELEMETRY": "1",
                "DISABLE_AUTOUPDATER": "1",
            },
        }
    if agent == "codex":
        return {
            "command": [
                str(bin_dir / "codex"),
                "exec",
                "--skip-git-repo-check",
                "--ephemeral",
                "-o",
                "last.txt",
                "${task.prompt}",
            ],
            "env": {"CODEX_HOME": "${home}/.codex"},
            "files": {"~/.codex/config.toml": CODEX_CONFIG},
        }
    if agent == "opencode":
        return {
            "command": [
                str(bin_dir / "opencode"),
                "run",
                "--model",
                "fulmen/${model}",
                "--auto",
                "${task.prompt}",
            ],
            "env": {"OPENCODE_CONFIG_CONTENT": OPENCODE_CONFIG},
        }
    raise ValueError(f"unknown agent {agent!r}: claude-code, codex or opencode")


BINARIES = {"claude-code": "claude", "codex": "codex", "opencode": "opencode"}
# OpenCode is not among tests/command_agents' packages: it is taken from PATH
# (`npm install -g opencode-ai@1.18.33`) unless --opencode-dir names its folder.
OPENCODE_CONFIG = (
    '{"autoupdate": false, "share": "disabled", "provider": {"fulmen": {"npm": '
    '"@ai-sdk/openai-compatible", "name": "fulmen", "options": {"baseURL": "${openai_base_url}", '
    '"apiKey": "{env:OPENAI_API_KEY}"}, "models": {"${model}": {"name": "${model}"}}}}}'
)

# Runs in a child process with PYTHONPATH at one checkout: that checkout's store, gateway,
# runner and sandbox drive the agent against the engine at argv[1]'s engine_url.
_CHILD = r"""
import asyncio, json, socket, sys, urllib.request
from pathlib import Path
import uvicorn
try:  # the checkout before stable paths names the package fulmen.adapter
    from fulmen.adapter.transitions import load_attempt
except ImportError:
    from fulmen.transitions.trajectory import load_attempt
from fulmen.agent.command import CommandAgent, CommandAgentConfig
from fulmen.agent.runner import Runner
from fulmen.gateway import GatewayConfig, create_app
from fulmen.store import open_store
from fulmen.types import LLMResource, ResourcesCreate, RolloutCreate

spec = json.loads(sys.argv[1])
out = Path(spec["out"])

def cache_counters():
    root = spec["engine_url"].removesuffix("/v1")
    with urllib.request.urlopen(root + "/metrics", timeout=30) as response:
        lines = response.read().decode().splitlines()
    values = dict(line.split(" ", 1) for line in lines if line and not line.startswith("#"))
    return [float(values.get("fulmen_engine_prefix_cache_%s_tokens_total" % k, 0))
            for k in ("hit", "miss")]

async def main():
    async with open_store("sqlite:///" + str(out / "store.db")) as store:
        await store.add_resources(ResourcesCreate(resources={"llm": LLMResource(
            base_url=spec["engine_url"], model=spec["model"],
            sampling={"default": {
                "max_tokens": spec["max_tokens"], "temperature": spec["temperature"]}})}))
        app = create_app(store, [spec["engine_url"]], config=GatewayConfig(
            flush_interval_s=0.05, model_map={"*": spec["model"]}))
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
        serving = asyncio.create_task(server.serve(sockets=[sock]))
        while not server.started:
            await asyncio.sleep(0.05)
        url = "http://127.0.0.1:%d" % sock.getsockname()[1]
        agent = CommandAgent(CommandAgentConfig(
            **spec["agent"], timeout_s=spec["timeout_s"], sandbox={"backend": "bwrap"}))
        rollouts, counters = [], [cache_counters()]
        for _ in range(spec["rollouts"]):  # one at a time: the engine's counters per rollout
            rollouts += await store.enqueue([RolloutCreate(input=spec["task"])])
            await Runner(store, agent, concurrency=1, gateway_url=url).run(until_idle=True)
            await app.state.gateway.flush()
            counters.append(cache_counters())
        server.should_exit = True
        await serving
        result = []
        for i, rollout in enumerate(rollouts):
            done = await store.get_rollout(rollout.rollout_id)
            records = await load_attempt(store, rollout.rollout_id)
            calls = [
                {"endpoint": c.endpoint, "model": c.request.get("model"),
                 "prompt_tokens": len(c.prompt_token_ids or []),
                 "error": None if c.error is None else str(c.error)[:300]}
                for c in records.calls
            ]
            if records.calls:
                first = records.calls[0]
                (out / ("rollout-%d-first-call.json" % (i + 1))).write_text(json.dumps(
                    {"request": first.request, "prompt_token_ids": first.prompt_token_ids}))
            hit, miss = (b - a for a, b in zip(counters[i], counters[i + 1]))
            result.append({"status": str(done.status), "error": done.error, "calls": calls,
                           "cached_tokens": hit, "prompt_tokens": hit + miss})
        print("RESULT " + json.dumps(result), flush=True)

asyncio.run(main())
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _metrics(root_url: str) -> dict[str, float]:
    """The engine's ``/metrics`` samples without labels, by name."""
    with urllib.request.urlopen(f"{root_url}/metrics", timeout=30) as response:
        text = response.read().decode()
    values: dict[str, float] = {}
    for line in text.splitlines():
        match = re.match(r"^([a-zA-Z_:][\w:]*) ([-+0-9.eE]+|NaN)$", line)
        if match:
            values[match.group(1)] = float(match.group(2))
    return values


class Engine:
    """This checkout's ``fulmen serve --model tiny-long`` in a child process of its own."""

    def __init__(self, python: str, log: Path, threads: int) -> None:
        self.port = _free_port()
        self.root_url = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        env.pop("FULMEN_ENGINE_TOKEN", None)
        self._log = log.open("wb")
        command = [python, "-m", "fulmen", "serve", "--model", MODEL, "--port", str(self.port)]
        self.proc = subprocess.Popen(
            [*command, "--threads", str(threads)],
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"engine exited with {self.proc.returncode}; see {log}")
            try:
                with urllib.request.urlopen(f"{self.root_url}/health", timeout=5):
                    return
            except OSError:
                time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"engine did not answer /health in 300 s; see {log}")

    def stop(self) -> None:
        """End the engine (its own process group) and close its log."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


def _first_difference(out: Path) -> dict[str, Any] | None:
    """Where the first calls of rollouts 1 and 2 part: tokens in common, the text around it."""
    paths = [out / f"rollout-{i}-first-call.json" for i in (1, 2)]
    if not all(p.exists() for p in paths):
        return None
    one, two = (json.loads(p.read_text()) for p in paths)
    ids_one, ids_two = one["prompt_token_ids"] or [], two["prompt_token_ids"] or []
    common = next(
        (i for i, (a, b) in enumerate(zip(ids_one, ids_two, strict=False)) if a != b),
        min(len(ids_one), len(ids_two)),
    )
    text_one, text_two = (json.dumps(x["request"], sort_keys=True) for x in (one, two))
    at = next(
        (i for i, (a, b) in enumerate(zip(text_one, text_two, strict=False)) if a != b),
        None,
    )
    found: dict[str, Any] = {
        "common_prefix_tokens": common,
        "prompt_tokens": [len(ids_one), len(ids_two)],
        "identical_requests": text_one == text_two,
    }
    if common < min(len(ids_one), len(ids_two)):
        decode = _decoder()
        found["prompt_text_at_difference"] = [
            decode(ids[max(0, common - 24) : common + 24]) for ids in (ids_one, ids_two)
        ]
    if at is not None:  # the whole request: client metadata (session ids) included
        found["request_char"] = at
        found["request_at_difference"] = [
            text[max(0, at - 40) : at + 60] for text in (text_one, text_two)
        ]
    return found


def _decoder() -> Any:
    """The served model's tokenizer's ``decode`` (this checkout's ``tiny-long``)."""
    sys.path.insert(0, str(ROOT))
    from fulmen.engines.models import resolve_model

    transformers = importlib.import_module("transformers")  # the engine's extra
    return transformers.AutoTokenizer.from_pretrained(str(resolve_model(MODEL))).decode


def _rate(cached: float, total: float) -> float | None:
    return round(cached / total, 4) if total else None


def _bin_dir(agent: str, args: argparse.Namespace) -> Path:
    """The folder holding ``agent``'s executable."""
    if agent == "opencode":
        found = shutil.which("opencode")
        return args.opencode_dir or (Path(found).parent if found else Path("/usr/local/bin"))
    return args.node_modules / ".bin"


def measure(
    agent: str, tree: Path, label: str, args: argparse.Namespace, out: Path
) -> dict[str, Any]:
    """Run ``args.rollouts`` rollouts of ``agent`` with ``tree``'s runner; the engine's counts."""
    out.mkdir(parents=True, exist_ok=True)
    engine = Engine(args.python, out / "engine.log", args.engine_threads)
    try:
        spec = {
            "out": str(out),
            "engine_url": f"{engine.root_url}/v1",
            "model": MODEL,
            "max_tokens": args.max_tokens,
            "temperature": args.temperature,
            "task": TASK,
            "rollouts": args.rollouts,
            "timeout_s": args.timeout_s,
            "agent": recipe(agent, _bin_dir(agent, args)),
        }
        started = time.monotonic()
        child = subprocess.run(
            [args.python, "-c", _CHILD, json.dumps(spec)],
            env={**os.environ, "PYTHONPATH": str(tree)},
            cwd=out,
            capture_output=True,
            text=True,
            check=False,
        )
        seconds = time.monotonic() - started
        (out / "child.log").write_text(child.stdout + child.stderr)
        lines = [x for x in child.stdout.splitlines() if x.startswith("RESULT ")]
        if child.returncode != 0 or not lines:
            tail = (child.stdout + child.stderr)[-2000:]
            raise RuntimeError(f"{label} run of {agent} failed ({child.returncode}):\n{tail}")
        rollouts = json.loads(lines[-1].removeprefix("RESULT "))
        counters = _metrics(engine.root_url)
    finally:
        engine.stop()
    hit = counters.get("fulmen_engine_prefix_cache_hit_tokens_total", 0.0)
    miss = counters.get("fulmen_engine_prefix_cache_miss_tokens_total", 0.0)
    return {
        "agent": agent,
        "tree": label,
        "checkout": str(tree),
        "rollouts": args.rollouts,
        "concurrency": 1,
        "succeeded": sum(r["status"].endswith("succeeded") for r in rollouts),
        "calls_per_rollout": [len(r["calls"]) for r in rollouts],
        "failed_calls": sum(c["error"] is not None for r in rollouts for c in r["calls"]),
        "first_call_prompt_tokens": [
            r["calls"][0]["prompt_tokens"] if r["calls"] else None for r in rollouts
        ],
        "prompt_tokens": int(hit + miss),
        "cached_tokens": int(hit),
        "hit_rate": _rate(hit, hit + miss),
        "hit_rate_per_rollout": [_rate(r["cached_tokens"], r["prompt_tokens"]) for r in rollouts],
        "hit_rate_rollouts_after_the_first": _rate(
            sum(r["cached_tokens"] for r in rollouts[1:]),
            sum(r["prompt_tokens"] for r in rollouts[1:]),
        ),
        "first_calls_of_rollouts_1_2": _first_difference(out),
        "seconds": round(seconds, 1),
        "errors": sorted({r["error"] for r in rollouts if r["error"]}),
    }


def main(argv: list[str] | None = None) -> None:
    """Parse the options and print one JSON line per agent and checkout."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument(
        "--agents", nargs="+", choices=sorted(BINARIES), default=["claude-code", "codex"]
    )
    parser.add_argument("--rollouts", type=int, default=4, help="rollouts of the one task")
    parser.add_argument(
        "--before",
        type=Path,
        default=None,
        help="the checkout before stable paths (git archive 43928d5^); without it only this "
        "checkout is measured",
    )
    parser.add_argument(
        "--node-modules",
        type=Path,
        default=NODE_MODULES,
        help="where `npm ci` in tests/command_agents installed the agents (.bin/claude, codex)",
    )
    parser.add_argument(
        "--opencode-dir",
        type=Path,
        default=None,
        help="the folder of the `opencode` executable (default: found on PATH)",
    )
    parser.add_argument("--python", default=sys.executable, help="interpreter of both checkouts")
    parser.add_argument(
        "--max-tokens", type=int, default=16, help="the gateway's max_tokens on every call"
    )
    parser.add_argument(
        "--temperature",
        type=float,
        default=0.0,
        help="the gateway's temperature on every call (0: greedy, so the number of calls a "
        "rollout makes does not vary by chance between the checkouts)",
    )
    parser.add_argument("--timeout-s", type=float, default=600, help="per rollout")
    parser.add_argument("--engine-threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=None, help="keep stores and prompts here")
    args = parser.parse_args(argv)
    if args.rollouts < 2:
        parser.error("--rollouts must be at least 2: a later rollout is what may hit the cache")
    trees = [("after", ROOT)]
    if args.before is not None:
        if not (args.before / "fulmen" / "agent" / "command").is_dir():
            parser.error(f"--before {args.before} holds no fulmen checkout")
        trees.insert(0, ("before", args.before.resolve()))
    out = args.out or Path(tempfile.mkdtemp(prefix="prefix-cache-paths-"))
    for agent in args.agents:
        binary = _bin_dir(agent, args) / BINARIES[agent]
        if not binary.exists() or shutil.which("node") is None:
            print(
                json.dumps(
                    {
                        "agent": agent,
                        "skipped": f"{binary} or node is missing (run `npm ci` in "
                        "tests/command_agents, or pass --node-modules / --opencode-dir)",
                    }
                ),
                flush=True,
            )
            continue
        for label, tree in trees:
            print(json.dumps(measure(agent, tree, label, args, out / agent / label)), flush=True)
    if args.out is None:
        shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
