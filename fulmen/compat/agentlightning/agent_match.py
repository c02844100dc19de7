"""0.x's ``agent_match`` / ``trained_agents`` regular expressions as fulmen's agent patterns.

0.x trained the calls whose agent name matched a regular expression (``re.search``); fulmen
selects them with ``fnmatch`` patterns (``algorithm.transitions.agents``). The expressions 0.x
users write are words, anchored words and alternatives of those; they translate exactly. Any
other expression is refused with the pattern list to write instead of guessed at.

>>> agent_patterns("write")
('*write*',)
>>> agent_patterns("^write_query$|check")
('write_query', '*check*')
"""

from __future__ import annotations

import re

from fulmen.compat.agentlightning.errors import NotSupported

__all__ = ["agent_patterns"]

_WORD = re.compile(r"(\^?)([A-Za-z0-9_\-. ]+?)(\$?)")


def agent_patterns(expression: str) -> tuple[str, ...]:
    """Translate a 0.x agent regular expression into fnmatch patterns, or ``NotSupported``."""
    patterns: list[str] = []
    for branch in expression.split("|"):
        match = _WORD.fullmatch(branch)
        if match is None or (match.group(2) and "." in match.group(2)):
            raise NotSupported(
                f"agent_match / trained_agents {expression!r}",
                why="fulmen selects trained calls by fnmatch patterns, and only plain words, "
                "anchored words (^name$) and their alternatives (a|b) translate exactly",
                instead="set algorithm.transitions.agents to fnmatch patterns "
                "(e.g. ['write_*', '*query'])",
            )
        start, word, end = match.groups()
        patterns.append(f"{'' if start else '*'}{word}{'' if end else '*'}")
    return tuple(patterns)
