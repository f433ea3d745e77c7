"""The pending-connection cap evicts from the address holding the most pending sockets.

A unit test of :class:`rtalab.loadtests.reasoner.conns.Guard` on stand-in transports: under a
reconnect flood a prompt client's connection soon becomes the globally oldest pending one;
the cap must still close the flood's own sockets (the end-to-end case is
``test_reasoner_limits.py::test_a_share_is_kept_for_clients_that_complete_requests``)."""

from __future__ import annotations

from rtalab.loadtests.reasoner.conns import Guard, Limits


class FakeTransport:
    """Just what the guard calls: ``abort``."""

    def __init__(self, name: str):
        self.name = name
        self.aborted = False

    def abort(self) -> None:
        self.aborted = True


def guard(pending: int) -> Guard:
    return Guard(Limits(30.0, 30.0, 30.0, max_connections=1000,
                        max_connections_per_client=500, max_pending=pending))


def test_a_flood_evicts_its_own_sockets_not_an_older_prompt_client() -> None:
    g = guard(pending=8)
    client = FakeTransport("client")
    assert g.admit(client, "127.0.0.1") is None  # the oldest pending connection of all
    flood = []
    for i in range(40):  # four attacking addresses, round robin, far past the cap
        t = FakeTransport(f"a{i}")
        assert g.admit(t, f"127.0.0.{2 + i % 4}") is None
        flood.append(t)
    assert not client.aborted
    assert g.n_pending == 8
    assert sum(t.aborted for t in flood) == 40 + 1 - 8
    # within an address, the oldest goes first: each address keeps its newest sockets
    by_address = [flood[a::4] for a in range(4)]
    kept = [sum(not t.aborted for t in mine) for mine in by_address]
    assert sorted(kept) == [1, 2, 2, 2], kept  # the flood's share split evenly
    for mine, k in zip(by_address, kept, strict=True):  # each address keeps its newest
        assert [t.aborted for t in mine] == [True] * (len(mine) - k) + [False] * k
    assert all(not t.aborted for t in flood[-4:])


def test_the_prompt_client_is_served_and_no_longer_counted_pending() -> None:
    g = guard(pending=2)
    client = FakeTransport("client")
    g.admit(client, "127.0.0.1")
    g.serving(client)  # a complete request: not pending
    assert g.n_pending == 0
    a, b, c = (FakeTransport(n) for n in "abc")
    for t in (a, b, c):
        g.admit(t, "127.0.0.2")
    assert (a.aborted, b.aborted, c.aborted, client.aborted) == (True, False, False, False)
    g.waiting(client)  # a new request after an idle pause: pending again
    assert g.n_pending == 3  # the cap is enforced when a connection arrives
    d = FakeTransport("d")
    g.admit(d, "127.0.0.2")  # the attacker holds the most pending: its oldest (b) goes first
    assert (b.aborted, client.aborted, d.aborted) == (True, False, False)
    assert g.n_pending < 2 + 1


def test_release_forgets_pending_and_is_idempotent() -> None:
    g = guard(pending=4)
    t = FakeTransport("t")
    g.admit(t, "127.0.0.9")
    g.release(t)
    g.release(t)
    assert (g.n_pending, g.pending, dict(g.per_peer)) == (0, {}, {})
