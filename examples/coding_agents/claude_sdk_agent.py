"""A coding agent on the claude-agent-sdk (PyPI ``claude-agent-sdk``), run by fulmen per rollout.

    /opt/coding-agents/bin/python claude_sdk_agent.py "TASK"

The SDK starts the Claude Code CLI it bundles, which reads the rollout's endpoint and key from
the environment fulmen gives the command (``ANTHROPIC_BASE_URL``, ``ANTHROPIC_API_KEY``) and
the model name from ``FULMEN_MODEL``. The agent may use Bash, Write and Read in its working
directory; it prints its reply as one JSON line, ``{"result": ...}``, the shape of
``claude -p --output-format json``.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys

from claude_agent_sdk import (
    AssistantMessage,
    ClaudeAgentOptions,
    ClaudeSDKError,
    ResultMessage,
    TextBlock,
    query,
)


async def main(task: str) -> int:
    """Run the task; print the reply; exit 1 when the agent's turn ended in an error.

    The reply is the result of a turn that succeeded, else the model's last text: a turn that
    fails (an answer cut at ``max_tokens`` four times) ends in an error note of Claude Code's own
    (model ``<synthetic>``) that is the same for every rollout, not the model's.
    """
    options = ClaudeAgentOptions(
        model=os.environ["FULMEN_MODEL"],
        allowed_tools=["Bash", "Write", "Read"],
        permission_mode="acceptEdits",
        cwd=os.getcwd(),
    )
    reply, failed = "", True
    try:
        async for message in query(prompt=task, options=options):
            if isinstance(message, AssistantMessage) and message.model != "<synthetic>":
                text = "".join(b.text for b in message.content if isinstance(b, TextBlock))
                reply = text or reply
            elif isinstance(message, ResultMessage):
                failed = message.is_error
                if not failed and message.result:
                    reply = message.result
    except ClaudeSDKError as error:  # the SDK raises on an error result
        print(f"claude_sdk_agent: {error}", file=sys.stderr)
    print(json.dumps({"result": reply}), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit('usage: claude_sdk_agent.py "TASK"')
    sys.exit(asyncio.run(main(sys.argv[1])))
