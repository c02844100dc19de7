"""The tests' throwaway PostgreSQL server starts even when its port is taken before it binds."""

from __future__ import annotations

import socket

import pytest

from tests import pg_server


def test_a_port_taken_before_the_server_binds_it_is_tried_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    try:
        pg_server._find_bin("pg_ctl")
    except pg_server.PostgresUnavailable as exc:
        pytest.skip(str(exc))
    monkeypatch.delenv("FULMEN_TEST_PG_URL", raising=False)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        held = int(taken.getsockname()[1])
        picked: list[int] = []
        free_port = pg_server._free_port

        def pick() -> int:  # the first pick is a port another process holds by now
            picked.append(held if not picked else free_port())
            return picked[-1]

        monkeypatch.setattr(pg_server, "_free_port", pick)
        with pg_server.postgres_server() as url:
            port = int(url.rsplit(":", 1)[1].split("/")[0])
            assert picked[0] == held and port == picked[-1] != held and len(picked) == 2
            with socket.create_connection(("127.0.0.1", port), timeout=5):
                pass  # the server listens on the port it was started on
