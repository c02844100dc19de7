"""The runs comparison and a run's live diagnosis, as the dashboard serves them.

Both call the code the command line calls: ``fulmen.debugging.runs_compare.compare_runs``
(``fulmen runs compare``) and ``fulmen.trainer.diagnosis.diagnose_stored_run`` (``fulmen runs
diagnose``); this module only checks what a web request asks for and, for a run that is still
training, reads its engine's counters so the diagnosis can speak of the prefix cache as the
end-of-run diagnosis does.

The engine of a run is the ``llm`` of the newest resources version the run published (the one
its rollouts sample from now). The dashboard asks it only where it already trusts the store's
engine URLs or was given that engine: started with ``--engine auto`` (what ``fulmen train``
does), or with ``--engine URL`` naming the run's engine; without ``--engine`` a stored URL never
makes the dashboard send a request. Only the built-in engine exports the prefix-cache counters;
any other engine, or one that does not answer within ``ENGINE_TIMEOUT_S``, leaves that finding
out.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import httpx

from fulmen.debugging.runs_compare import compare_runs, comparison_json
from fulmen.errors import InvalidRequest
from fulmen.trainer.diagnosis import diagnose_stored_run, diagnosis_json, engine_counters
from fulmen.types import LLMResource, RunStatus
from fulmen.types.limits import MAX_ID_LENGTH

if TYPE_CHECKING:
    from fulmen.dashboard.runs_view import RunVersions
    from fulmen.store.base import Store

__all__ = ["ENGINE_TIMEOUT_S", "MAX_COMPARED", "parse_run_ids", "run_diagnosis", "runs_comparison"]

logger = logging.getLogger(__name__)

#: Runs one comparison may name: each costs a scan of the store's validation rollouts.
MAX_COMPARED = 8
#: How long a diagnosis waits for a running run's engine to list its counters.
ENGINE_TIMEOUT_S = 2.0


def parse_run_ids(given: Sequence[str]) -> list[str]:
    """Return the run ids of ``?run=A&run=B...``: two to ``MAX_COMPARED``, distinct, each an id.

    A parameter is one id, so any character an id may hold (a comma too) passes. Anything else
    is an ``InvalidRequest`` (422) naming what was given.
    """
    ids = [i for i in given if i]
    if len(ids) < 2:
        raise InvalidRequest(f"compare needs at least two runs (?run=A&run=B), got {len(ids)}")
    if len(ids) > MAX_COMPARED:
        raise InvalidRequest(f"compare takes at most {MAX_COMPARED} runs, got {len(ids)}")
    repeated = sorted({i for i in ids if ids.count(i) > 1})
    if repeated:
        raise InvalidRequest(f"a run is named twice: {repeated[0]!r}")
    too_long = next((i for i in ids if len(i) > MAX_ID_LENGTH), None)
    if too_long is not None:
        raise InvalidRequest(f"not a run id (over {MAX_ID_LENGTH} characters): {too_long[:80]!r}")
    return ids


async def runs_comparison(store: Store, run_ids: Sequence[str]) -> dict[str, Any]:
    """Compare ``run_ids`` as ``fulmen runs compare --json`` does (``comparison_json``).

    A run the store does not hold is a ``NotFound`` (404) naming it.
    """
    return comparison_json(await compare_runs(store, run_ids))


async def run_diagnosis(
    store: Store,
    run_id: str,
    versions: RunVersions,
    *,
    linked_url: str | None = None,
    follows_store: bool = False,
) -> dict[str, Any]:
    """Diagnose ``run_id`` from its stored metrics (``diagnosis_json``), live while it trains.

    ``follows_store`` (``--engine auto``) lets it ask the engine the run's resources name;
    otherwise only when that engine is ``linked_url`` (``--engine URL``; see the module
    docstring). ``engine`` in the answer names the engine whose counters were read (``None``:
    none were: the run has ended, published no ``llm``, is not the linked engine, or its engine
    did not answer).
    """
    run = await store.get_run(run_id)
    url = None
    if (follows_store or linked_url is not None) and run.status is RunStatus.RUNNING:
        url = await _engine_url(store, run_id, versions)
        if not follows_store and (linked_url is None or _root(linked_url) != url):
            url = None
    counters = await _counters(url) if url is not None else None
    diagnosis = await diagnose_stored_run(store, run_id, engine=counters)
    return {**diagnosis_json(diagnosis), "engine": url if counters is not None else None}


async def _engine_url(store: Store, run_id: str, versions: RunVersions) -> str | None:
    published = await versions.of(run_id)
    if not published:
        return None
    llm = (await store.get_resources(max(published))).resources.get("llm")
    if not isinstance(llm, LLMResource):
        return None
    return _root(llm.base_url)


def _root(url: str) -> str:
    return url.rstrip("/").removesuffix("/v1")


async def _counters(url: str) -> dict[str, float] | None:
    try:
        async with httpx.AsyncClient(timeout=ENGINE_TIMEOUT_S) as client:
            page = await client.get(f"{url}/metrics")
    except (httpx.HTTPError, httpx.InvalidURL) as exc:  # an engine gone with its run
        logger.info("dashboard: engine %s lists no counters (%s)", url, exc)
        return None
    return engine_counters(page.text) if page.status_code == 200 else None
