"""``local_server`` (OpenEnv's local-process mode) keeps to the server it started.

A port picked free can be taken by another process before the server binds it; another
rollout's environment server answering on it would be stepped by this rollout. The library
itself is not needed here (its end-to-end tests run in ``.venvs/openenv``).
"""

from __future__ import annotations

import sys

import httpx
import pytest

import fulmen.engines.launcher as launcher
from fulmen.engines.launcher import free_port
from fulmen.environments.openenv import local_server
from tests.test_process_group import health_server

SERVER = [sys.executable, "-m", "tests.health_server", "--port", "{port}"]


async def test_a_server_whose_port_another_server_answers_on_moves(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    taken = free_port()
    picked: list[int] = []

    def pick(host: str = "127.0.0.1") -> int:  # the taken port first, then really free ones
        picked.append(taken if not picked else free_port(host))
        return picked[-1]

    monkeypatch.setattr(launcher, "free_port", pick)
    with health_server(taken) as other:
        async with local_server(SERVER, timeout_s=60) as url:
            assert url != f"http://127.0.0.1:{taken}"
            async with httpx.AsyncClient() as http:
                answered_by = int((await http.get(f"{url}/health")).text)
            assert answered_by != other.pid
        assert picked[0] == taken and url == f"http://127.0.0.1:{picked[-1]}"
        assert other.poll() is None  # the other server is left alone


async def test_a_server_that_exits_is_reported_with_its_output() -> None:
    with pytest.raises(Exception, match="exited with 2") as raised:
        async with local_server([sys.executable, "-c", "import sys; print('no'); sys.exit(2)"],
                                timeout_s=60):  # fmt: skip
            pass
    assert "no" in str(raised.value)
