"""The Reasoner's connection limits (rtalab.loadtests.reasoner.conns), expected values written out:
the total and per-client limits refuse the connection *at* the limit, not one later; the
limits derived from the open-file limit keep a reserve; among peers holding as many pending
sockets, the one whose oldest is the oldest loses it (stand-in transports, no server)."""

from __future__ import annotations

from rtalab.loadtests.reasoner.conns import Guard, Limits, default_max_connections
from rtalab.loadtests.reasoner.settings import ServerSettings
from tests.serve.test_pending_eviction import FakeTransport


def _guard(total: int, per_client: int, pending: int = 0) -> Guard:
    return Guard(Limits(30.0, 30.0, 30.0, max_connections=total,
                        max_connections_per_client=per_client, max_pending=pending))


def test_the_per_client_limit_refuses_the_connection_at_the_limit() -> None:
    g = _guard(total=100, per_client=3)
    assert [g.admit(FakeTransport(f"c{i}"), "10.0.0.1") for i in range(4)] == [
        None, None, None, "limit-client"]
    assert g.admit(FakeTransport("other"), "10.0.0.2") is None  # another client: its own 3


def test_the_total_limit_refuses_the_connection_at_the_limit() -> None:
    g = _guard(total=4, per_client=4)
    got = [g.admit(FakeTransport(f"c{i}"), f"10.0.0.{i}") for i in range(5)]
    assert got == [None, None, None, None, "limit-total"]
    assert len(g.open) == 4


def test_limits_from_settings_and_the_file_limit() -> None:
    # 1,024 open files: a reserve of max(128, 102) -> 896 sockets; 10,000: 10 % -> 9,000
    assert default_max_connections(1024) == 896
    assert default_max_connections(10_000) == 9000
    assert default_max_connections(100) == 16  # never fewer than 16
    lim = Limits.of(ServerSettings(max_connections=10, max_connections_per_client=50))
    assert (lim.max_connections, lim.max_connections_per_client, lim.max_pending) == (10, 10, 5)
    lim = Limits.of(ServerSettings(), limit=1024)
    assert (lim.max_connections, lim.max_connections_per_client, lim.max_pending) == (
        896, 448, 448)


def test_among_peers_holding_as_many_the_oldest_socket_goes() -> None:
    g = _guard(total=100, per_client=100, pending=4)
    a1, b1, a2, b2 = (FakeTransport(n) for n in ("a1", "b1", "a2", "b2"))
    for t, peer in ((a1, "10.0.0.1"), (b1, "10.0.0.2"), (a2, "10.0.0.1"), (b2, "10.0.0.2")):
        assert g.admit(t, peer) is None
    g.admit(FakeTransport("c"), "10.0.0.3")  # at the cap: a and b hold 2 each, a1 is oldest
    assert (a1.aborted, b1.aborted, a2.aborted, b2.aborted) == (True, False, False, False)
