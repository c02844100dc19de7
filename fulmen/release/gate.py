"""The promotion gate: every window, judge the arms, record it, and promote or roll back.

A window's verdict (``judge``) is ``waiting`` until each arm has ``min_sessions`` sessions
with a reward; then ``better`` when the candidate's mean is higher at level ``alpha`` (Welch)
and at least ``min_ratio`` times the incumbent's, ``worse`` when it is lower at ``alpha``,
``inconclusive`` otherwise. The figures are those of all the release's sessions so far, so
each window looks at more evidence; asking for several consecutive windows guards against
one lucky look (it is not a sequential-testing correction: pick ``alpha`` with the number of
windows the release may run in mind).

The gate keeps no state of its own: each window is an event of the release in the store
(``Store.decide_release``) whose id is the window's number counted from the release's
creation, so two gateways running the gate write each window once, and the streak of
verdicts is read back from the events. A promotion or rollback names the revision it was
decided on; if another gate or a person changed the release meanwhile, the store refuses it.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from fulmen.errors import Conflict, FulmenError
from fulmen.gateway.release_config import GateConfig
from fulmen.release.figures import ReleaseFigures, p_text, release_figures
from fulmen.release.outcomes import ReleaseOutcomes
from fulmen.store.base import Store
from fulmen.types.releases import Release, ReleaseDecision, ReleaseState

__all__ = ["Gate", "Verdict", "judge"]

_log = logging.getLogger(__name__)

VerdictKind = Literal["waiting", "better", "worse", "inconclusive"]


@dataclass(frozen=True)
class Verdict:
    """A window's judgement of the arms, with the reason in words."""

    kind: VerdictKind
    reason: str


def judge(figures: ReleaseFigures, config: GateConfig) -> Verdict:
    """Return the verdict of one window on ``figures`` (see the module docstring)."""
    inc, cand, test = figures.incumbent, figures.candidate, figures.comparison
    fewest = min(inc.rewarded, cand.rewarded)
    if test is None or fewest < config.min_sessions:
        return Verdict(
            "waiting",
            f"{inc.rewarded} incumbent and {cand.rewarded} candidate sessions with a reward; "
            f"{config.min_sessions} each are needed",
        )
    shown = (
        f"candidate {test.mean_b:.4g} vs incumbent {test.mean_a:.4g}, difference "
        f"{test.difference:+.4g} [{test.ci_low:+.4g}, {test.ci_high:+.4g}], {p_text(test.p_value)}"
    )
    if test.p_value < config.alpha and test.difference < 0:
        return Verdict("worse", f"{shown}: worse at alpha={config.alpha}")
    if test.p_value < config.alpha and test.difference > 0:
        if test.ratio is not None and test.ratio < config.min_ratio:
            return Verdict(
                "inconclusive",
                f"{shown}: better, but the ratio {test.ratio:.3f} is under {config.min_ratio}",
            )
        ratio = f", ratio {test.ratio:.3f}" if test.ratio is not None else ""
        return Verdict("better", f"{shown}{ratio}: better at alpha={config.alpha}")
    return Verdict("inconclusive", f"{shown}: no difference at alpha={config.alpha}")


def _streak(release: Release, kind: VerdictKind) -> int:
    """Count the release's latest window events in a row whose verdict is ``kind``."""
    count = 0
    for event in reversed(release.events):
        if event.kind != "window":
            break
        if event.figures.get("verdict") != kind:
            break
        count += 1
    return count


class Gate:
    """Judges one release every ``config.window_s`` and promotes or rolls it back.

    Args:
        store: the store holding the release and its sessions.
        name: the release's name.
        config: the gate's thresholds (``GateConfig``).
        by: the name recorded on its events.
        clock: Unix seconds (injectable: tests move time instead of waiting).
    """

    def __init__(
        self,
        store: Store,
        name: str,
        config: GateConfig,
        *,
        by: str = "gate",
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._store = store
        self.name = name
        self.config = config
        self._by = by
        self._clock = clock
        self._outcomes = ReleaseOutcomes(store, name)

    async def step(self) -> Release:
        """Judge the current window and act on the streak; return the release afterwards.

        A release that is no longer a canary is returned unchanged (the gate has nothing to
        decide).
        """
        release = await self._store.get_release(self.name)
        if release.state is not ReleaseState.CANARY:
            return release
        figures = release_figures(await self._outcomes.read())
        verdict = judge(figures, self.config)
        window = max(0, math.floor((self._clock() - release.created_at) / self.config.window_s))
        release = await self._store.decide_release(
            self.name,
            ReleaseDecision(
                event_id=f"window-{window}",
                kind="window",
                by=self._by,
                reason=verdict.reason,
                figures={"window": window, "verdict": verdict.kind, **figures.as_json()},
            ),
        )
        if release.state is not ReleaseState.CANARY:
            return release  # someone decided while this window was judged
        better, worse = _streak(release, "better"), _streak(release, "worse")
        if better >= self.config.windows:
            return await self._decide(release, "promoted", better, verdict)
        if worse >= self.config.rollback_windows:
            return await self._decide(release, "rolled_back", worse, verdict)
        return release

    async def _decide(
        self,
        release: Release,
        kind: Literal["promoted", "rolled_back"],
        streak: int,
        verdict: Verdict,
    ) -> Release:
        word = "better" if kind == "promoted" else "worse"
        decision = ReleaseDecision(
            event_id=f"{kind}-{release.revision}",
            kind=kind,
            by=self._by,
            reason=f"{streak} consecutive windows {word}; last: {verdict.reason}",
            expected_revision=release.revision,
        )
        try:
            decided = await self._store.decide_release(self.name, decision)
        except Conflict:  # another gate or a person got there first
            return await self._store.get_release(self.name)
        _log.warning("release %r %s by the gate: %s", self.name, kind, decision.reason)
        return decided

    async def run(self, *, stop: asyncio.Event | None = None) -> None:
        """Judge a window every ``window_s`` until the release is decided or ``stop`` is set."""
        stop = stop or asyncio.Event()
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), self.config.window_s)
                return
            except TimeoutError:
                pass
            try:
                release = await self.step()
            except FulmenError as exc:  # the store away: try again next window
                _log.warning("release %r gate: window not judged: %s", self.name, exc)
                continue
            except Exception:  # a gate that stops would leave the canary undecided, unsaid
                _log.exception("release %r gate: window not judged", self.name)
                continue
            if release.state is not ReleaseState.CANARY:
                return
