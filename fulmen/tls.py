"""One TLS context for the HTTP clients fulmen opens per rollout, per reward or per poll.

Every ``httpx.AsyncClient`` (and so every ``AsyncOpenAI``) builds an ``ssl.SSLContext`` and
loads the system's CA certificates into it when it is made, whether or not it ever speaks TLS:
about 20 ms of CPU each on the 2-core CI machine, against 0.1 ms for a client handed a
ready context (measured 2026-12-06). fulmen opens short-lived clients at a rollout's rate
(environment agents, rewards sent through the gateway, engine polls), so those share the
context built here.
"""

from __future__ import annotations

import functools
import ssl

__all__ = ["tls_context"]


@functools.cache
def tls_context() -> ssl.SSLContext:
    """Return the process's shared client TLS context: httpx's defaults (certifi's CAs, verified).

    Built on first use and reused after; pass it as ``verify=`` to ``httpx.Client`` and
    ``httpx.AsyncClient``. An ``SSLContext`` is safe to share between clients and threads once
    configured, and nothing here changes it after it is built.
    """
    import httpx

    return httpx.create_ssl_context()
