"""The Live user's reading of a refused answer, per binding, as docs/load.md states it (A2A 1.0
§5.4 read backwards, then errors.md §2's codes): the gRPC status and its ``google.rpc.ErrorInfo``,
the HTTP status and ``Retry-After``, the JSON-RPC error code.  Each mapping decides whether the
policy retries, so a wrong row is a retry of a non-retryable failure, or none of a retryable
one.  No server: the failed call is a stand-in with the two methods grpcio's error has."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import grpc
import pytest
from google.protobuf import any_pb2
from google.rpc import error_details_pb2, status_pb2

from rtalab.loadtests.live.grpc_channel import HTTP_OF_STATUS, code_of_status, error_frame
from rtalab.loadtests.live.wire import DEFAULT_EXT_URI, http_error_frame, parse_event

P = DEFAULT_EXT_URI + "/"


@dataclass
class _RpcError:
    """What the channel reads of a failed gRPC call: its status and trailing metadata."""

    status: grpc.StatusCode
    reason: str | None = None
    metadata: dict[str, str] | None = None

    def code(self) -> grpc.StatusCode:
        return self.status

    def details(self) -> str:
        return "refused"

    def trailing_metadata(self) -> tuple[tuple[str, bytes], ...]:
        if self.reason is None and self.metadata is None:
            return ()
        info = error_details_pb2.ErrorInfo(reason=self.reason or "", domain="a2a-protocol.org",
                                           metadata=self.metadata or {})
        detail = any_pb2.Any()
        detail.Pack(info)
        status = status_pb2.Status(code=self.status.value[0], message="refused", details=[detail])
        return (("grpc-status-details-bin", status.SerializeToString()),)


# docs/load.md "Statuses": without an ErrorInfo, the status alone decides
@pytest.mark.parametrize(("status", "code"), [
    ("UNAUTHENTICATED", "auth"), ("PERMISSION_DENIED", "auth"),
    ("INVALID_ARGUMENT", "schema-validation"), ("FAILED_PRECONDITION", "schema-validation"),
    ("UNIMPLEMENTED", "schema-validation"), ("NOT_FOUND", "session-not-found"),
    ("RESOURCE_EXHAUSTED", "rate-limited"), ("DEADLINE_EXCEEDED", "upstream-timeout"),
    ("INTERNAL", "internal"), ("UNKNOWN", "internal"), ("DATA_LOSS", "internal"),
])
def test_a_grpc_status_without_error_info_maps_to_the_documented_code(status: str,
                                                                      code: str) -> None:
    got, name, retry_ms = code_of_status(_RpcError(grpc.StatusCode[status]))
    assert (got, name, retry_ms) == (code, status, None)


# gRPC's own HTTP mapping (grpc/doc/http-grpc-status-mapping), so a refused answer is counted
# alike on every binding: the statuses a server refuses a turn with
@pytest.mark.parametrize(("status", "http"), [
    ("UNAUTHENTICATED", 401), ("PERMISSION_DENIED", 403), ("INVALID_ARGUMENT", 400),
    ("NOT_FOUND", 404), ("RESOURCE_EXHAUSTED", 429), ("DEADLINE_EXCEEDED", 504),
    ("UNIMPLEMENTED", 501), ("UNAVAILABLE", 503), ("INTERNAL", 500),
])
def test_a_grpc_status_counts_as_its_http_equivalent(status: str, http: int) -> None:
    assert HTTP_OF_STATUS[status] == http
    frame = error_frame("r1", _RpcError(grpc.StatusCode[status]), DEFAULT_EXT_URI)
    assert frame["error"]["code"] == http


@pytest.mark.parametrize(("reason", "code"), [
    ("TASK_NOT_FOUND", "session-not-found"), ("INVALID_PARAMS", "schema-validation"),
    ("EXTENSION_SUPPORT_REQUIRED", "extension-inactive"), ("INTERNAL_ERROR", "internal"),
])
def test_the_a2a_reason_of_an_error_info_decides_over_the_status(reason: str, code: str) -> None:
    """A2A's ErrorInfo reason is read before the status (a NOT_FOUND may be INVALID_PARAMS)."""
    err = _RpcError(grpc.StatusCode.FAILED_PRECONDITION, reason=reason)
    assert code_of_status(err)[0] == code


def test_the_servers_own_error_code_decides_over_reason_and_status() -> None:
    """The profile's ``errorCode`` in the ErrorInfo is the server's word: a RESOURCE_EXHAUSTED
    the server calls ``upstream-timeout`` is one, and its retryAfterMs is kept."""
    err = _RpcError(grpc.StatusCode.RESOURCE_EXHAUSTED, reason="TASK_NOT_FOUND",
                    metadata={"errorCode": "upstream-timeout", "retryAfterMs": "1500"})
    assert code_of_status(err) == ("upstream-timeout", "RESOURCE_EXHAUSTED", 1500.0)
    frame = error_frame("r1", err, DEFAULT_EXT_URI)
    ev = parse_event(frame, DEFAULT_EXT_URI)
    assert (ev.error_code, ev.retry_after_ms) == ("upstream-timeout", 1500.0)
    assert frame["error"]["code"] == 429


# HTTP: a 408 is a timeout of the server's, Retry-After is in seconds (RFC 9110 §10.2.3)
def test_http_408_is_upstream_timeout() -> None:
    frame = http_error_frame(408, b"", {}, DEFAULT_EXT_URI)
    assert frame["error"]["data"][P + "errorCode"] == "upstream-timeout"


@pytest.mark.parametrize(("value", "ms"), [("2", 2000.0), ("0.5", 500.0), ("0", 0.0)])
def test_retry_after_seconds_become_milliseconds(value: str, ms: float) -> None:
    frame = http_error_frame(429, b"", {"Retry-After": value}, DEFAULT_EXT_URI)
    assert frame["error"]["data"][P + "retryAfterMs"] == ms
    assert parse_event(frame, DEFAULT_EXT_URI).retry_after_ms == ms


@pytest.mark.parametrize("hint", [-1, "-250"])
def test_a_negative_retry_after_ms_in_an_error_info_is_ignored(hint: Any) -> None:
    """An HTTP+JSON error's ErrorInfo ``retryAfterMs`` below 0 is no hint: the header's (or
    none) stands."""
    body = {"error": {"code": 429, "status": "RESOURCE_EXHAUSTED", "message": "slow down",
                      "details": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo",
                                   "reason": "RATE_LIMITED", "domain": "rtalab",
                                   "metadata": {"errorCode": "rate-limited",
                                                "retryAfterMs": hint}}]}}
    data = http_error_frame(429, json.dumps(body).encode(), {}, DEFAULT_EXT_URI)["error"]["data"]
    assert data[P + "errorCode"] == "rate-limited" and P + "retryAfterMs" not in data
    data = http_error_frame(429, json.dumps(body).encode(), {"Retry-After": "1"},
                            DEFAULT_EXT_URI)["error"]["data"]
    assert data[P + "retryAfterMs"] == 1000.0


@pytest.mark.parametrize("error", [{"code": -32603, "message": "boom"}, {"message": "no code"},
                                   {"code": -32099, "message": "server error"}])
def test_a_json_rpc_error_without_a_profile_code_is_internal(error: dict[str, Any]) -> None:
    """errors.md §2: an unclassified server-side failure is ``internal`` (retryable, fewer
    attempts) -- not a request error the policy would never retry."""
    ev = parse_event({"jsonrpc": "2.0", "id": "r1", "error": error}, DEFAULT_EXT_URI)
    assert ev.error_code == "internal"
