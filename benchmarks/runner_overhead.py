"""Runner and tracing overhead on this machine, against baselines measured in the same run.

Figures (one JSON line):
  span_us_fulmen / span_us_otel_bare: cost of one ``operation()`` span inside a rollout scope
      (stamping + conversion + queueing) vs a bare OTel SDK span with no processor.
  rollouts_per_s_async_c32 / rollouts_per_s_direct: a no-op async agent through the Runner at
      concurrency 32 (claim, run, reward span, flush, report, heartbeats) vs the bare store calls
      the runner makes (claim 32, add the spans, report each) in a loop. The agent runs in a
      thread with its own event loop per attempt (the default, ``async_isolation="thread"``);
      ``rollouts_per_s_async_c32_loop`` runs it on the runner's loop instead.
  rollouts_per_s_async_thread_c2 / rollouts_per_s_async_loop_c2: the same at concurrency 2,
      to compare with a worker process at the same concurrency (next line).
  rollouts_per_s_sync_process / rollouts_per_s_sync_thread: a no-op sync agent in worker
      processes vs worker threads (concurrency 2).
  command_ms_*: the command path's cost per rollout (a fresh directory, the sandbox, the
      spawn, a verifier) for a no-op program (``true``), against ``command_ms_inprocess``, the
      same no-op as an in-process async rollout, all at concurrency 2 and in the same run:
      ``process`` (no bubblewrap), ``bwrap`` (no network), ``bwrap_gateway`` (the relay to a
      model URL), ``bwrap_gateway_verifier`` (plus a verifier ``true``); ``*_ratio`` divides
      each by the in-process figure.

Run: ``python benchmarks/runner_overhead.py`` (about 40 s, memory store);
``--command-only`` measures the command path alone.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from opentelemetry.sdk.trace import TracerProvider

from fulmen.agent.api import rollout
from fulmen.agent.command import CommandAgent, CommandAgentConfig
from fulmen.agent.runner import Runner
from fulmen.store import open_store
from fulmen.tracing import operation, rollout_scope
from fulmen.tracing.exporter import StoreSpanExporter
from fulmen.tracing.provider import create_provider, provider_tracer
from fulmen.types import AttemptStatus, LLMResource, ResourcesCreate, RolloutCreate, SpanCreate

N_SPANS = 20_000
N_ASYNC = 2_000
N_SYNC = 200
N_COMMAND = 100
SYNC_SPEC = "benchmarks.runner_overhead:noop_sync"  # worker processes import it by name


@rollout
async def noop_async(task: Any) -> float:
    return 1.0


@rollout
def noop_sync(task: Any) -> float:
    return 1.0


async def span_costs() -> tuple[float, float]:
    async with open_store("memory://", watchdog_interval=None) as store:
        await store.enqueue([RolloutCreate(input=0)])
        (claim,) = await store.claim("bench")
        exporter = StoreSpanExporter(store, interval=0.05)
        exporter.start()
        tracer = provider_tracer(create_provider(exporter))
        with rollout_scope(tracer, claim.rollout.rollout_id, claim.attempt.attempt_id):
            start = time.perf_counter()
            for _ in range(N_SPANS):
                with operation("step"):
                    pass
            fulmen_us = (time.perf_counter() - start) / N_SPANS * 1e6
        await exporter.aclose()
    bare = TracerProvider().get_tracer("bench")
    start = time.perf_counter()
    for _ in range(N_SPANS):
        with bare.start_as_current_span("step"):
            pass
    bare_us = (time.perf_counter() - start) / N_SPANS * 1e6
    return fulmen_us, bare_us


async def runner_rate(agent: Any, n: int, *, model_url: str | None = None, **options: Any) -> float:
    async with open_store("memory://", watchdog_interval=1.0) as store:
        if model_url is not None:  # an llm resource: the command gets an endpoint (a relay)
            llm = LLMResource(base_url=model_url, model="policy")
            await store.add_resources(ResourcesCreate(resources={"llm": llm}))
        await store.enqueue([RolloutCreate(input=i) for i in range(n)])
        runner = Runner(store, agent, poll_interval=0.01, **options)
        start = time.perf_counter()
        stats = await runner.run(until_idle=True)
        elapsed = time.perf_counter() - start
        if stats.succeeded != n:
            raise RuntimeError(f"only {stats.succeeded} of {n} succeeded")
        return n / elapsed


async def direct_rate(n: int) -> float:
    async with open_store("memory://", watchdog_interval=1.0) as store:
        await store.enqueue([RolloutCreate(input=i) for i in range(n)])
        start = time.perf_counter()
        while claims := await store.claim("bench", limit=32):
            spans = [
                SpanCreate(
                    rollout_id=c.rollout.rollout_id,
                    attempt_id=c.attempt.attempt_id,
                    trace_id="1" * 32,
                    span_id=f"{k:016x}",
                    name="s",
                    start_time=0.0,
                )
                for c in claims
                for k in range(2)  # the runner writes a root span and a reward span
            ]
            await store.add_spans(spans)
            for c in claims:
                await store.update_attempt(c.attempt.attempt_id, status=AttemptStatus.SUCCEEDED)
        return n / (time.perf_counter() - start)


async def command_costs() -> dict[str, float]:
    """Milliseconds per rollout of the command path and of an in-process no-op, concurrency 2."""
    host = {"backend": "process", "network": "host"}
    cases: dict[str, tuple[dict[str, Any], str | None]] = {
        "process": ({"command": ["true"], "sandbox": host}, None),
        "bwrap": ({"command": ["true"], "sandbox": {"backend": "bwrap", "network": "none"}}, None),
        # Nothing listens at the model URL: ``true`` never calls it; the relay starts anyway.
        "bwrap_gateway": ({"command": ["true"]}, "http://127.0.0.1:9/v1"),
        "bwrap_gateway_verifier": (
            {"command": ["true"], "verifier": {"command": ["true"]}},
            "http://127.0.0.1:9/v1",
        ),
    }
    ms = {"inprocess": 1000 / await runner_rate(noop_async, N_COMMAND, concurrency=2)}
    for name, (raw, url) in cases.items():
        agent = CommandAgent(CommandAgentConfig.model_validate(raw))
        ms[name] = 1000 / await runner_rate(agent, N_COMMAND, model_url=url, concurrency=2)
    out = {f"command_ms_{k}": round(v, 2) for k, v in ms.items()}
    out |= {f"command_ms_{k}_ratio": round(v / ms["inprocess"], 1) for k, v in ms.items()}
    del out["command_ms_inprocess_ratio"]
    return out


async def main() -> None:
    if "--command-only" in sys.argv:
        print(json.dumps(await command_costs()))
        return
    fulmen_us, bare_us = await span_costs()
    result = {
        "span_us_fulmen": round(fulmen_us, 2),
        "span_us_otel_bare": round(bare_us, 2),
        "rollouts_per_s_async_c32": round(await runner_rate(noop_async, N_ASYNC, concurrency=32)),
        "rollouts_per_s_async_c32_loop": round(
            await runner_rate(noop_async, N_ASYNC, concurrency=32, async_isolation="loop")
        ),
        "rollouts_per_s_async_thread_c2": round(
            await runner_rate(noop_async, N_SYNC, concurrency=2, async_isolation="thread"), 1
        ),
        "rollouts_per_s_async_loop_c2": round(
            await runner_rate(noop_async, N_SYNC, concurrency=2, async_isolation="loop"), 1
        ),
        "rollouts_per_s_direct": round(await direct_rate(N_ASYNC)),
        "rollouts_per_s_sync_process": round(
            await runner_rate(SYNC_SPEC, N_SYNC, concurrency=2, sync_isolation="process"), 1
        ),
        "rollouts_per_s_sync_thread": round(
            await runner_rate(noop_sync, N_SYNC, concurrency=2, sync_isolation="thread"), 1
        ),
        **await command_costs(),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    logging.basicConfig(level=logging.ERROR)
    asyncio.run(main())
