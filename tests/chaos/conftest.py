"""Fixtures shared with the wire tests (both bindings)."""

from tests.serve.conftest import binding  # noqa: F401 - re-exported fixture
