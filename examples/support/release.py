"""Release the offline-trained adapter to a share of new customers; the gate decides.

After ``run.py`` (traffic, feedback, offline SFT) the trained adapter is a model version of
the training run, recorded in ``OUT/train/store.db``. This script serves new customers (drawn
with another seed, none of their messages in the traffic) through the engine and the gateway
with a canary release (``docs/releases.md``): the base model is the incumbent, the adapter
version the candidate, sent ``--share`` of the sessions (10%); the gateway loads the adapter
into the engine itself. Customers come in waves; when a wave's tickets close, each ticket's
reward (1.0 when the bot routed it to the team that solved it) is posted by session id to the
gateway, which holds it with its session until the session is written. The promotion gate in
the gateway judges every ``--window-s`` seconds and promotes after ``--windows`` better windows
in a row (or rolls back after two worse ones). The script stops when the gate has decided or
``--max-sessions`` customers have come, and prints the release's figures and events; the
traffic goes to the training run's store, where ``fulmen release status NAME`` reads it.

    python examples/support/release.py --out runs/support --share 0.1
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import httpx
import yaml
from bot import route
from customers import draw_customers
from openai import AsyncOpenAI
from traffic import TRAFFIC_SEED, start_gateway, wait_healthy

from fulmen.engines.launcher import BuiltinLauncher, free_port
from fulmen.release import ReleaseOutcomes, release_figures
from fulmen.store import open_store
from fulmen.types import RewardCreate

__all__ = ["release_adapter"]

HERE = Path(__file__).resolve().parent
RELEASE_SEED = 3


async def _candidate(store_url: str) -> tuple[str, int]:
    """Return the latest run of the training store and its last adapter version."""
    async with open_store(store_url, watchdog_interval=None) as store:
        runs = (await store.list_runs(limit=1)).items
        if not runs:
            raise SystemExit(f"no training run in {store_url}: run run.py first")
        versions = [
            v for v in await store.list_model_versions(runs[0].run_id) if v.kind == "adapter"
        ]
        if not versions:
            raise SystemExit(f"run {runs[0].run_id} published no adapter")
        return runs[0].run_id, versions[-1].version


def _gateway_config(out: Path, release: dict[str, Any]) -> Path:
    config = yaml.safe_load((HERE / "gateway.yaml").read_text())
    config["release"] = release
    path = out / "release-gateway.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


async def _wave(
    client: AsyncOpenAI,
    model: str,
    customers: list[tuple[int, tuple[str, str]]],
    *,
    release: str,
    concurrency: int,
    temperature: float,
) -> list[dict[str, Any]]:
    limit = asyncio.Semaphore(concurrency)

    async def one(index: int, text: str, department: str) -> dict[str, Any]:
        session_id = f"{release}-{index:05d}"  # a new conversation: a new session
        async with limit:
            team, _ = await route(
                client, model, text, session_id=session_id, temperature=temperature
            )
        return {"session_id": session_id, "department": department, "routed_to": team}

    return await asyncio.gather(*(one(i, t, d) for i, (t, d) in customers))


async def release_adapter(
    *,
    model: str,
    out: Path,
    share: float,
    window_s: float,
    windows: int,
    min_sessions: int,
    wave: int,
    max_sessions: int,
    traffic_sessions: int,
    concurrency: int = 8,
    temperature: float = 0.5,
) -> dict[str, Any]:
    """Run the release until the gate decides; returns its figures, events and timings."""
    store_url = f"sqlite:///{(out / 'train' / 'store.db').resolve()}"
    run_id, version = await _candidate(store_url)
    name = f"support-{int(time.time())}"
    release = {
        "name": name,
        "incumbent": model,
        "candidate": {"run_id": run_id, "version": version},
        "share": share,
        "poll_s": 1.0,
        "gate": {"window_s": window_s, "windows": windows, "rollback_windows": 2,
                 "min_sessions": min_sessions, "alpha": 0.05},
    }  # fmt: skip
    config = _gateway_config(out, release)
    # New customers: messages the adapter was not trained on (a customer may write the same as
    # another one here, as real ones do; there are fewer distinct messages than sessions).
    seen = {text for text, _ in draw_customers(traffic_sessions, seed=TRAFFIC_SEED)}
    drawn = draw_customers(3 * max_sessions, seed=RELEASE_SEED)
    customers = [c for c in drawn if c[0] not in seen][:max_sessions]
    started = time.perf_counter()
    engine = BuiltinLauncher(model, max_batch=concurrency, log_path=out / "release-engine.log")
    await asyncio.to_thread(engine.start)
    port = free_port()
    gateway = start_gateway(
        engine.base_url, store_url, out, port, config=config, log_name="release-gateway.log"
    )
    tickets: list[dict[str, Any]] = []
    state = "canary"
    url = f"http://127.0.0.1:{port}"
    try:
        await wait_healthy(url, gateway, timeout=300)
        client = AsyncOpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=600)
        async with client, httpx.AsyncClient(timeout=60) as http:
            numbered = list(enumerate(customers))
            while state == "canary" and len(tickets) < len(numbered):
                batch = numbered[len(tickets) : len(tickets) + wave]
                closed = await _wave(
                    client,
                    model,
                    batch,
                    release=name,
                    concurrency=concurrency,
                    temperature=temperature,
                )
                tickets += closed
                for ticket in closed:  # the tickets close: rewards by session id
                    value = 1.0 if ticket["routed_to"] == ticket["department"] else 0.0
                    reward = RewardCreate(
                        session_id=ticket["session_id"],
                        values={"reward": value},
                        key=f"ticket-{ticket['session_id']}",
                    )
                    posted = await http.post(
                        f"{url}/v1/rewards", content=reward.model_dump_json(exclude_none=True)
                    )
                    posted.raise_for_status()
                state = (await http.get(f"{url}/healthz")).json()["release"]["state"]
                print(json.dumps({"sessions": len(tickets), "state": state}), flush=True)
            await asyncio.sleep(3.0)  # the last sessions idle past 2 s: written
    finally:
        gateway.send_signal(signal.SIGINT if os.name == "nt" else signal.SIGTERM)
        try:
            gateway.wait(timeout=60)
        finally:
            await asyncio.to_thread(engine.stop)
    async with open_store(store_url, watchdog_interval=None) as store:
        stored = await store.get_release(name)
        figures = release_figures(await ReleaseOutcomes(store, name).read())
    return {
        "release": name,
        "candidate_version": f"{run_id} v{version}",
        "state": stored.state.value,
        "customers": len(tickets),
        **figures.as_json(),
        "events": [
            {"kind": e.kind, "verdict": e.figures.get("verdict"), "by": e.by, "reason": e.reason}
            for e in stored.events
        ],
        "seconds": time.perf_counter() - started,
    }


def main() -> None:
    """Command line: see the module docstring."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--model", default="gemma-3-270m")
    parser.add_argument("--out", type=Path, default=Path("runs/support"))
    parser.add_argument("--share", type=float, default=0.1, help="the candidate's sessions")
    parser.add_argument("--window-s", type=float, default=60.0, help="the gate's window")
    parser.add_argument("--windows", type=int, default=3, help="better windows to promote")
    parser.add_argument("--min-sessions", type=int, default=10,
                        help="rewarded sessions an arm needs before a window decides")  # fmt: skip
    parser.add_argument("--wave", type=int, default=40, help="customers between reward posts")
    parser.add_argument("--max-sessions", type=int, default=600)
    parser.add_argument("--traffic-sessions", type=int, default=64,
                        help="run.py's --sessions (their messages are not reused)")  # fmt: skip
    args = parser.parse_args()
    figures = asyncio.run(
        release_adapter(
            model=args.model,
            out=args.out,
            share=args.share,
            window_s=args.window_s,
            windows=args.windows,
            min_sessions=args.min_sessions,
            wave=args.wave,
            max_sessions=args.max_sessions,
            traffic_sessions=args.traffic_sessions,
        )
    )
    (args.out / "release.json").write_text(json.dumps(figures, indent=2))
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
