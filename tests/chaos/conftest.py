"""Fixtures shared with the wire tests: the bindings the chaos proxy fronts."""

import pytest


@pytest.fixture(params=["sse", "ws"])
def binding(request: pytest.FixtureRequest) -> str:
    """The bindings the chaos proxy faults (JSON-RPC over SSE, WebSocket); it passes gRPC
    through unfaulted (docs/chaos.md), so gRPC is not a case of the proxy's tests."""
    return str(request.param)
