"""Command agents: any executable, in any language, run per rollout in a sandbox.

``CommandAgentConfig`` says what to run and how it gets its task and reward; ``CommandAgent``
is the ``Agent`` the runner runs for it. See ``docs/command-agents.md``.
"""

from __future__ import annotations

from fulmen.agent.command.agent import CommandAgent, CommandFailed, CommandResult
from fulmen.agent.command.config import CommandAgentConfig, SandboxConfig, VerifierConfig

__all__ = [
    "CommandAgent",
    "CommandAgentConfig",
    "CommandFailed",
    "CommandResult",
    "SandboxConfig",
    "VerifierConfig",
]
