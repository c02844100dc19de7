"""A coding agent on the claude-agent-sdk (PyPI ``claude-agent-sdk``), run by fulmen per rollout.

    /opt/coding-agents/bin/python claude_sdk_agent.py "TASK"

The SDK starts the Claude Code CLI it bundles, which reads the rollout's endpoint and key from
the environment fulmen gives the command (``ANTHROPIC_BASE_URL``, ``ANTHROPIC_API_KEY``) and
the model name from ``FULMEN_MODEL``. The agent may use Bash, Write and Read in its working
directory; it prints the final result as one JSON line, ``{"result": ...}``, the shape of
``claude -p --output-format json``.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys

from claude_agent_sdk import ClaudeAgentOptions, ResultMessage, query


async def main(task: str) -> int:
    """Run the task; print the result; exit 1 when the agent reports an error."""
    options = ClaudeAgentOptions(
        model=os.environ["FULMEN_MODEL"],
        allowed_tools=["Bash", "Write", "Read"],
        permission_mode="acceptEdits",
        cwd=os.getcwd(),
    )
    failed = True
    async for message in query(prompt=task, options=options):
        if isinstance(message, ResultMessage):
            print(json.dumps({"result": message.result or ""}), flush=True)
            failed = message.is_error
    return 1 if failed else 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit('usage: claude_sdk_agent.py "TASK"')
    sys.exit(asyncio.run(main(sys.argv[1])))
