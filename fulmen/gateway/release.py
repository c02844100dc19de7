"""Canary routing: which model serves a production session, as the release in the store says.

``ReleaseRouter`` holds the gateway's view of one release (``ReleaseConfig``). When the gateway
starts it makes the upstreams serve the arms that are adapter versions of the store, puts the
release's definition in the store (a no-op when it is there) and reads its state; then it
re-reads the state every ``poll_s``, so a promotion or rollback decided anywhere (``fulmen
release promote``, a gate) reaches this gateway's traffic within that time.

A session's arm depends only on its id, the release's name and seed, and the candidate's
share (a seeded hash, independent of capture's sampling hash): the same on every call of the
session and on every gateway. While the release is a canary each session keeps its arm; once
promoted every call goes to the candidate, once rolled back to the incumbent. The state is one
reference swapped by the poll, so a call reads either the old state or the new one, and a call
already sent finishes on the model it was sent to: both stay served.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import Mapping, Sequence

from fulmen.engines.link import EngineLink
from fulmen.errors import ConfigError, Conflict, FulmenError
from fulmen.gateway.release_config import ReleaseConfig
from fulmen.gateway.sampling import sample_point
from fulmen.store.base import Store
from fulmen.tracing.backoff import Backoff, retry_call
from fulmen.types.releases import ArmModel, Release, ReleaseArm, ReleaseState

__all__ = ["ReleaseRouter"]

_log = logging.getLogger(__name__)
_BACKOFF = Backoff(initial=0.2, maximum=10.0, deadline=None)


class ReleaseRouter:
    """Routes production sessions between a release's arms (see the module docstring).

    Args:
        config: the ``release:`` section.
        store: where the release is kept and its model versions are found.
        engines: the base URLs of the token-level upstreams, which are asked to serve the arms
            that are adapter versions (``ReleaseConfig.serve_versions``).
        engine_keys: the admin token of each of ``engines`` that has one, by base URL.
    """

    def __init__(
        self,
        config: ReleaseConfig,
        store: Store,
        engines: Sequence[str] = (),
        *,
        engine_keys: Mapping[str, str] | None = None,
    ) -> None:
        self.config = config
        self._store = store
        self._engines = list(engines)
        self._engine_keys = dict(engine_keys or {})
        definition = config.definition()
        self.release: Release | None = None
        self._state = ReleaseState.CANARY
        self._models = {
            ReleaseArm.INCUMBENT: definition.incumbent.model,
            ReleaseArm.CANDIDATE: definition.candidate.model,
        }
        self.calls: Counter[ReleaseArm] = Counter()  # calls routed to each arm (metrics)
        self.error: ConfigError | None = None
        self._ready = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @property
    def name(self) -> str:
        """The release's name."""
        return self.config.name

    @property
    def state(self) -> ReleaseState:
        """The state as last read from the store (``canary`` before the first read)."""
        return self._state

    def arm_of(self, session_key: str) -> ReleaseArm:
        """Return the arm that serves a call of the session ``session_key`` now."""
        state = self._state
        if state is ReleaseState.PROMOTED:
            return ReleaseArm.CANDIDATE
        if state is ReleaseState.ROLLED_BACK:
            return ReleaseArm.INCUMBENT
        key = f"release\x00{self.config.name}\x00{session_key}"
        point = sample_point(key, seed=self.config.seed)
        return ReleaseArm.CANDIDATE if point < self.config.share else ReleaseArm.INCUMBENT

    def model_of(self, arm: ReleaseArm) -> str:
        """Return the model name sent upstream for ``arm``."""
        return self._models[arm]

    # -- the release in the store ---------------------------------------------------------------

    def start(self) -> None:
        """Start preparing and following the release (needs the serving event loop)."""
        if self._task is None:
            self._task = asyncio.create_task(self._follow(), name="fulmen-release")

    async def ready(self, timeout: float) -> bool:
        """Wait until the release's state has been read once; ``False`` if ``timeout`` passed.

        Raises the ``ConfigError`` that keeps the release from being served (a model version
        that does not exist or is not an adapter, another definition under its name).
        """
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._ready.wait(), timeout)
        if self.error is not None:
            raise self.error
        return self._ready.is_set()

    async def aclose(self) -> None:
        """Stop following the release."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _follow(self) -> None:
        try:
            await self._prepare()
        except Conflict as exc:
            self.error = ConfigError(f"release {self.name!r}: {exc}")
        except ConfigError as exc:
            self.error = exc
        if self.error is not None:
            _log.error("%s", self.error)
            self._ready.set()
            return
        while True:
            await asyncio.sleep(self.config.poll_s)
            try:
                self._apply(await self._store.get_release(self.name))
            except FulmenError as exc:  # the store away: keep serving the last state
                _log.warning("release %r not re-read: %s", self.name, exc)
            except Exception:  # never stop following: a later read may succeed
                _log.exception("release %r not re-read", self.name)

    async def _prepare(self) -> None:
        """Serve the arms' adapter versions, put the release in the store, read its state."""
        if self.config.serve_versions:
            for arm in ReleaseArm:
                await self._serve(self.config.definition().serving(arm))
        put = await retry_call(
            lambda: self._store.put_release(self.config.definition()),
            backoff=_BACKOFF,
            what=f"put release {self.name!r}",
        )
        self._apply(put)

    async def _serve(self, arm: ArmModel) -> None:
        if arm.run_id is None or arm.version is None or not self._engines:
            return
        versions = await retry_call(
            lambda: self._store.list_model_versions(arm.run_id),
            backoff=_BACKOFF,
            what=f"read run {arm.run_id!r}'s model versions",
        )
        version = next((v for v in versions if v.version == arm.version), None)
        if version is None:
            raise ConfigError(
                f"release {self.name!r}: run {arm.run_id!r} has no model version {arm.version}",
            )
        if version.kind != "adapter":
            raise ConfigError(
                f"release {self.name!r}: version {arm.version} of run {arm.run_id!r} holds full "
                "weights, which would replace the engine's base model for both arms: serve it "
                "on an engine of its own (`fulmen models serve`) and give the arm its model name"
            )
        for url in self._engines:
            try:
                await EngineLink(url, token=self._engine_keys.get(url)).serve(version, arm.model)
            except FulmenError as exc:
                raise ConfigError(
                    f"release {self.name!r}: {url} did not load {arm.model!r}: {exc}"
                ) from exc
            _log.info("release %r: %s serves %s as %r", self.name, url, version.path, arm.model)

    def _apply(self, release: Release) -> None:
        if release.definition() != self.config.definition():
            _log.error(
                "release %r in the store has another definition than this gateway's config; "
                "serving the config's arms with the store's state",
                self.name,
            )
        if release.state is not self._state:
            _log.info("release %r is %s", self.name, release.state.value)
        self.release = release
        self._state = release.state
        self._ready.set()
