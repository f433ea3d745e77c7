"""TLS for every rtalab server, gRPC's credentials, and (re-exported) the clients' side.

- The clients' side — :class:`ClientTls`, the one-line certificate problems
  (:func:`describe`, :func:`reason`, :func:`diagnose`) and the client options — is
  :mod:`rtalab.sim.shared.tls` (standard library only, so ``sim``'s commands have it too);
  everything of it is importable from here.
- :func:`client_grpc_credentials` — ``grpc.ChannelCredentials`` of a :class:`ClientTls`.
- :class:`ServerTls` — what a server presents and requires: ``--tls-cert`` / ``--tls-key``
  and ``--tls-client-ca`` (require client certificates signed by it).  It builds the server
  ``ssl.SSLContext``, uvicorn's keyword arguments and gRPC server credentials.
- The server options (:data:`TLS_CERT`, :data:`TLS_KEY`, :data:`TLS_CLIENT_CA`), added by
  :func:`add_server_tls` and read back, validated, by :func:`server_tls_from_args`.

``grpc`` is imported only by the gRPC helpers (it comes with the ``a2a-sdk[grpc]`` extra).
"""

from __future__ import annotations

import argparse
import ssl
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from rtalab.sim.shared.argtypes import Option
from rtalab.sim.shared.tls import (  # the clients' side, re-exported (__all__)
    CA,
    CLIENT_CERT,
    CLIENT_EXPIRED,
    CLIENT_KEY,
    CLIENT_REJECTED,
    CLIENT_REJECTED_LIKELY,
    CLIENT_REQUIRED,
    CLIENT_REQUIRED_LIKELY,
    ENV,
    EXPIRED,
    HOSTNAME,
    INSECURE,
    INSECURE_WARNING,
    NOT_TLS,
    NOT_YET,
    SELF_SIGNED,
    UNKNOWN_CA,
    VERIFY_FAILED,
    ClientTls,
    TlsError,
    add_client_tls,
    client_tls_from_args,
    describe,
    diagnose,
    path_args,
    pem_file,
    problem,
    read_pem,
    reason,
    short_reason,
)

#: everything public here, the clients' side of rtalab.sim.shared.tls included
__all__ = [
    "CA", "CLIENT_CERT", "CLIENT_EXPIRED", "CLIENT_KEY", "CLIENT_REJECTED",
    "CLIENT_REJECTED_LIKELY", "CLIENT_REQUIRED", "CLIENT_REQUIRED_LIKELY", "ENV", "EXPIRED",
    "HOSTNAME", "INSECURE", "INSECURE_WARNING", "NOT_TLS", "NOT_YET", "SELF_SIGNED", "TLS_CERT",
    "TLS_CLIENT_CA", "TLS_KEY", "UNKNOWN_CA", "VERIFY_FAILED", "ClientTls", "ServerTls",
    "TlsError", "add_client_tls", "add_server_tls", "client_grpc_credentials",
    "client_tls_from_args", "describe", "diagnose", "path_args", "pem_file", "problem", "read_pem",
    "reason", "server_tls_from_args", "short_reason",
]


def client_grpc_credentials(tls: ClientTls) -> Any:
    """``grpc.ChannelCredentials`` for a secure gRPC channel: root certificates from
    ``tls.ca`` (None: gRPC's defaults), the client certificate and key if given.  gRPC cannot
    skip verification, so ``insecure`` is a :class:`TlsError` here."""
    # lazy: +58 ms (grpc) off importing tls
    import grpc

    if tls.insecure:
        raise TlsError("--insecure is not available on gRPC (grpcio always verifies the "
                       "server's certificate): give --ca FILE with the server's CA")
    chain, key = tls.client_pair()
    return grpc.ssl_channel_credentials(
        root_certificates=read_pem(tls.ca, "--ca") if tls.ca else None,
        private_key=key, certificate_chain=chain)


# --------------------------------------------------------------------------- the server side


@dataclass(frozen=True)
class ServerTls:
    """What a server presents (``cert`` chain and ``key``; the key may sit in the cert
    file) and requires (``client_ca``: client certificates signed by it).  ``cert`` None:
    plain HTTP."""

    cert: str | None = None
    key: str | None = None
    client_ca: str | None = None

    def __post_init__(self) -> None:
        """The combinations that make no sense (TlsError)."""
        if (self.key or self.client_ca) and not self.cert:
            given = "--tls-key" if self.key else "--tls-client-ca"
            raise TlsError(f"{given} needs --tls-cert FILE (the server's certificate)")

    @property
    def enabled(self) -> bool:
        """True when the server speaks TLS."""
        return bool(self.cert)

    @property
    def scheme(self) -> str:
        """``https`` or ``http``."""
        return "https" if self.enabled else "http"

    def context(self) -> ssl.SSLContext:
        """The server ``SSLContext`` (client certificates required when ``client_ca``); a
        file that does not load is a :class:`TlsError`."""
        return _server_context(self)

    def uvicorn_kwargs(self) -> dict[str, Any]:
        """The TLS keyword arguments of ``uvicorn.run`` / ``uvicorn.Config`` ({} without
        TLS)."""
        if not self.enabled:
            return {}
        kw: dict[str, Any] = {"ssl_certfile": self.cert, "ssl_keyfile": self.key}
        if self.client_ca:
            kw.update(ssl_ca_certs=self.client_ca, ssl_cert_reqs=int(ssl.CERT_REQUIRED))
        return kw

    def grpc_credentials(self) -> Any:
        """``grpc.ServerCredentials`` (client certificates required when ``client_ca``)."""
        # lazy: +62 ms (grpc) off importing tls
        import grpc

        self.context()  # the files load (one TlsError line, not a gRPC core message)
        chain = read_pem(self.cert, "--tls-cert")
        key = read_pem(self.key, "--tls-key") if self.key else chain
        return grpc.ssl_server_credentials(
            [(key, chain)],
            root_certificates=read_pem(self.client_ca, "--tls-client-ca") if self.client_ca
            else None,
            require_client_auth=bool(self.client_ca))

    def to_args(self) -> list[str]:
        """The command-line options that give a child server these settings."""
        return path_args((("--tls-cert", self.cert), ("--tls-key", self.key),
                           ("--tls-client-ca", self.client_ca)))


@lru_cache(maxsize=16)
def _server_context(tls: ServerTls) -> ssl.SSLContext:
    """The cached server context of ``tls`` (see :meth:`ServerTls.context`)."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(str(tls.cert), tls.key)
    except (ssl.SSLError, OSError) as e:
        key = f" / --tls-key {tls.key}" if tls.key else ""
        raise TlsError(f"--tls-cert {tls.cert}{key}: cannot load the server certificate and "
                       f"its key ({short_reason(e)})") from None
    if tls.client_ca:
        try:
            ctx.load_verify_locations(cafile=tls.client_ca)
        except (ssl.SSLError, OSError) as e:
            raise TlsError(f"--tls-client-ca {tls.client_ca}: not a PEM CA certificate file "
                           f"({short_reason(e)})") from None
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


TLS_CERT = Option("--tls-cert FILE", "serve HTTPS with this certificate chain (PEM; default: "
                                     "plain HTTP)", pem_file)
TLS_KEY = Option("--tls-key FILE", "private key (PEM) of --tls-cert (default: in the "
                                   "--tls-cert file)", pem_file)
TLS_CLIENT_CA = Option("--tls-client-ca FILE", "require client certificates signed by these "
                                               "CAs (PEM; mutual TLS)", pem_file)


def add_server_tls(p: argparse.ArgumentParser) -> None:
    """``--tls-cert``, ``--tls-key`` and ``--tls-client-ca``."""
    group = p.add_argument_group("TLS when serving")
    for option in (TLS_CERT, TLS_KEY, TLS_CLIENT_CA):
        option.add(group)


def server_tls_from_args(args: argparse.Namespace) -> ServerTls:
    """The :class:`ServerTls` of parsed options, its files loaded once (TlsError if one does
    not)."""
    tls = ServerTls(cert=args.tls_cert, key=args.tls_key, client_ca=args.tls_client_ca)
    if tls.enabled:
        tls.context()
    return tls
