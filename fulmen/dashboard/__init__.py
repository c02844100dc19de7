"""The web dashboard: runs, rollouts, calls, tokens, prompts and model versions of a store.

``fulmen dashboard --store URL`` serves it; ``fulmen train`` serves it next to its run. The page
is plain ES modules under ``static/`` (no build step); its JSON API (``fulmen.dashboard.app``)
reads only through the ``Store`` interface. Importing this package imports nothing heavy.
"""

__all__: list[str] = []
