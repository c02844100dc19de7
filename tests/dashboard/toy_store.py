"""A store holding a real run of the toy example, plus the cases the dashboard tests look for.

``record_toy_store(dir)`` trains ``examples/toy`` with the ``tiny`` model for two GRPO steps
through ``fulmen train`` (the real built-in engine, gateway, runner, SQLite store and the
dashboard it serves meanwhile; ~20 s on an idle machine), then adds through the
store's API what a toy run does not make: two prompt versions (the second derived from the
first), and a finished rollout whose task and reply hold markup (``<script>``, an ``<img>``
with ``onerror``), as hostile agent text would. The browser tests and
``scripts/dashboard_screenshots.py`` both use it.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import socket
import sys
from dataclasses import dataclass
from pathlib import Path

from fulmen.store import open_store
from fulmen.tracing import semconv
from fulmen.types import (
    PromptLineage,
    PromptTemplate,
    ResourcesCreate,
)
from tests.dashboard.finished import finish_rollout

TOY = Path(__file__).resolve().parents[2] / "examples" / "toy" / "config.yaml"
HOSTILE_ID = "hostile-markup"
# As a command agent's run is stored (fulmen.agent.command): its stderr is the agent's too.
HOSTILE_COMMAND = {
    semconv.COMMAND_ROLE: "command",
    semconv.COMMAND_STATUS: "exited",
    semconv.COMMAND_EXIT_CODE: 3,
    semconv.COMMAND_DURATION_S: 1.5,
    semconv.COMMAND_OUTPUT_BYTES: 120,
    semconv.COMMAND_SANDBOX: "bwrap",
    semconv.COMMAND_STDOUT: "4",
    semconv.COMMAND_STDERR: "<img src=x onerror=\"window.__pwned='stderr'\"> gave up",
}
HOSTILE_TASK = "<script>window.__pwned = 'task'</script> what is 2+2?"
HOSTILE_REPLY = (
    "<img src=x onerror=\"window.__pwned='img'\"><script>window.__pwned='reply'</script>4"
)
PROMPT_V1 = PromptTemplate(
    instructions="Answer the question.\nUse the calculator for arithmetic.\nBe brief.",
    template="Question: {question}",
)
PROMPT_V2_INSTRUCTIONS = (
    "Answer the question.\nAlways use the calculator.\nBe brief.\nEnd with ANSWER: n."
)


@dataclass(frozen=True)
class ToyStore:
    """Where the recorded store is, what was added to it, and what ``fulmen train`` printed."""

    url: str
    run_dir: Path
    prompt_refs: tuple[str, str]
    train_output: str
    dashboard_port: int


def record_toy_store(root: Path) -> ToyStore:
    """Train the toy example into ``root/run`` with ``fulmen train`` and add the extra cases."""
    from fulmen.cli.main import main

    run_dir = root / "run"
    overrides = [
        f"run_dir={run_dir}",
        "algorithm.steps=2",
        "algorithm.tasks_per_step=2",
        "algorithm.group_size=4",
        "validation.every=1",
        "validation.max_tasks=4",
        "rollouts.concurrency=8",
    ]
    path, modules = list(sys.path), set(sys.modules)
    output = io.StringIO()
    port = _free_port()
    args = ["train", str(TOY), "--dashboard-port", str(port)]
    try:
        with contextlib.redirect_stdout(output):
            code = main([*args, *(a for o in overrides for a in ("--set", o))])
        if code != 0:
            raise RuntimeError(f"fulmen train exited with {code}: {output.getvalue()}")
    finally:  # the toy's ``agent`` module must not leak into other examples' tests
        sys.path[:] = path
        for name in set(sys.modules) - modules:
            if name in ("agent", "tasks"):
                del sys.modules[name]
    url = f"sqlite:///{run_dir / 'store.db'}"
    refs = asyncio.run(_add_cases(url))
    return ToyStore(
        url=url,
        run_dir=run_dir,
        prompt_refs=refs,
        train_output=output.getvalue(),
        dashboard_port=port,
    )


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def _add_cases(url: str) -> tuple[str, str]:
    async with open_store(url, watchdog_interval=None) as store:
        first = await store.add_resources(ResourcesCreate(resources={"prompt": PROMPT_V1}))
        v2 = PromptTemplate(
            instructions=PROMPT_V2_INSTRUCTIONS,
            template=PROMPT_V1.template,
            lineage=PromptLineage(
                parent=first.version, optimizer="apo", step=1, critique="it skipped the tool"
            ),
        )
        second = await store.add_resources(ResourcesCreate(resources={"prompt": v2}))
        await finish_rollout(
            store,
            HOSTILE_ID,
            task=HOSTILE_TASK,
            reward=0.5,
            reply=HOSTILE_REPLY,
            agent="<b>x</b>",
            command=HOSTILE_COMMAND,
        )
    return f"prompt@{first.version}", f"prompt@{second.version}"
