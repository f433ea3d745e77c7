"""The agent card served at ``/.well-known/agent-card.json``."""

from __future__ import annotations

from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentExtension,
    AgentInterface,
    AgentSkill,
    HTTPAuthSecurityScheme,
    SecurityRequirement,
    SecurityScheme,
    StringList,
)

from rtalab.loadtests.reasoner.intake import DIRECTIVES, Bounds
from rtalab.loadtests.reasoner.settings import ServerSettings
from rtalab.loadtests.reasoner.wire import to_struct

VERSION = "0.1.0"


def base_url(settings: ServerSettings) -> str:
    """The advertised base URL."""
    host = "127.0.0.1" if settings.host in ("0.0.0.0", "::", "") else settings.host
    return f"{settings.server_tls.scheme}://{host}:{settings.port}"


def grpc_address(settings: ServerSettings) -> str:
    """The advertised gRPC address, ``host:port`` (the form gRPC clients dial; TLS or not as
    the HTTP bindings: the same certificate serves both)."""
    host = "127.0.0.1" if settings.host in ("0.0.0.0", "::", "") else settings.host
    host = f"[{host}]" if ":" in host else host
    return f"{host}:{settings.grpc_port}"


def build_card(settings: ServerSettings, bounds: Bounds, dedup_mode: str) -> AgentCard:
    """Card advertising JSON-RPC + REST (+ gRPC when it is served), streaming, bearer auth
    and the profile (not required)."""
    url = base_url(settings)
    ext = AgentExtension(
        uri=settings.ext_uri, required=False,
        description="Realtime Agent A2A Profile: turn ids, directives, error codes, replay.",
        params=to_struct({"directives": list(DIRECTIVES), "bounds": bounds.as_card_params(),
                          "webSocket": url.replace("http", "ws", 1) + "/ws",
                          "dedupMode": dedup_mode}),
    )
    interfaces = [
        AgentInterface(url=url + "/", protocol_binding="JSONRPC", protocol_version="1.0"),
        AgentInterface(url=url, protocol_binding="HTTP+JSON", protocol_version="1.0"),
    ]
    if settings.grpc_port:
        interfaces.append(AgentInterface(url=grpc_address(settings), protocol_binding="GRPC",
                                         protocol_version="1.0"))
    card = AgentCard(
        name="rtalab reference Reasoner",
        description="Reference Reasoner of the Realtime Agent A2A Profile (retry policy lab).",
        version=VERSION,
        supported_interfaces=interfaces,
        capabilities=AgentCapabilities(streaming=True, extensions=[ext]),
        default_input_modes=["text/plain", "application/json"],
        default_output_modes=["text/plain", "application/json"],
        skills=[AgentSkill(id="voice-turn", name="Voice turn",
                           description="Answers one spoken user turn with spoken chunks.",
                           tags=["voice", "realtime"])],
    )
    if settings.tokens:
        card.security_schemes["bearer"].CopyFrom(SecurityScheme(
            http_auth_security_scheme=HTTPAuthSecurityScheme(scheme="Bearer")))
        card.security_requirements.append(SecurityRequirement(schemes={"bearer": StringList()}))
    return card
