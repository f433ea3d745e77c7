"""TLS for every rtalab client, in one place (the servers' side:
:mod:`rtalab.loadtests.common.tls`).

- :class:`ClientTls` — what a client trusts and presents: ``--ca FILE`` (default: the
  system's CAs), ``--client-cert FILE`` / ``--client-key FILE`` (mutual TLS) and
  ``--insecure`` (no verification at all, said loudly).  It builds the ``ssl.SSLContext``
  of every HTTP/WebSocket client (:meth:`ClientTls.context`: certificates and host names
  verified unless ``--insecure``); it travels to child processes as options
  (:meth:`ClientTls.to_args`) or as one environment variable (:meth:`ClientTls.to_env`).
  gRPC channel credentials are :func:`rtalab.loadtests.common.tls.client_grpc_credentials`.
- :func:`describe` / :func:`reason` — any exception of a connection attempt (ssl, httpx,
  urllib, websockets, gRPC) turned into ONE line naming the certificate problem (unknown CA,
  hostname mismatch, expired, client certificate required or rejected, TLS spoken to a
  plain-HTTP port), or None / the connection error when the failure is not a TLS one.
- The client options (:data:`CA`, :data:`CLIENT_CERT`, :data:`CLIENT_KEY`,
  :data:`INSECURE`) declared once, added by :func:`add_client_tls` and read back, validated,
  by :func:`client_tls_from_args` (a bad file or combination is a :class:`TlsError`: one
  line, exit 2).

Here in ``sim`` (standard library only) so that every command has them, the telemetry
scrape of ``rtalab calibrate --from prometheus:https://...`` included.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import ssl
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from rtalab.sim.shared.argtypes import Option, UsageError

ENV = "RTALAB_CLIENT_TLS"  # ClientTls as JSON, for child processes (Locust users, servers)
INSECURE_WARNING = ("--insecure: server certificates are NOT verified: anyone on the path can "
                    "answer in the target's name and read the bearer tokens")


class TlsError(UsageError):
    """A TLS setting or certificate problem the user must fix: one line, exit status 2."""


def pem_file(text: str) -> str:
    """A readable file (a PEM certificate, bundle or key); the path as given."""
    path = Path(text)
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"no such file: {text!r}")
    if not os.access(path, os.R_OK):
        raise argparse.ArgumentTypeError(f"cannot read {text!r}")
    return text


# --------------------------------------------------------------------------- the client side


@dataclass(frozen=True)
class ClientTls:
    """What a client trusts (``ca``; None: the system's CAs) and presents (``client_cert``,
    ``client_key``; the key may sit in the certificate file), or ``insecure``: verify
    nothing."""

    ca: str | None = None
    client_cert: str | None = None
    client_key: str | None = None
    insecure: bool = False

    def __post_init__(self) -> None:
        """The combinations that make no sense (TlsError)."""
        if self.client_key and not self.client_cert:
            raise TlsError("--client-key needs --client-cert FILE (the certificate it signs)")
        if self.insecure and self.ca:
            raise TlsError("--insecure and --ca exclude each other (--insecure verifies "
                           "nothing, so the CA would be ignored)")

    @property
    def mutual(self) -> bool:
        """True when the client presents a certificate (mTLS)."""
        return bool(self.client_cert)

    def context(self) -> ssl.SSLContext:
        """The client ``SSLContext`` (cached: one per settings and process; it is safe to
        share between threads and connections).  Certificate and host name verified against
        ``ca`` (or the system's CAs) unless ``insecure``; the client certificate loaded if
        given.  A file that does not load is a :class:`TlsError`."""
        return _client_context(self)

    def new_context(self, **_ignored: Any) -> ssl.SSLContext:
        """A fresh (uncached) :meth:`context`, for a client that changes what it is given
        (geventhttpclient's pool, as Locust's ``ssl_context_factory``; its keywords, such as
        ``cafile``, are ignored: the trust is this object's)."""
        return _client_context.__wrapped__(self)

    def httpx_verify(self) -> ssl.SSLContext:
        """The ``verify=`` argument of an httpx client (the same context)."""
        return self.context()

    def context_for(self, url: str) -> ssl.SSLContext | None:
        """:meth:`context` for an ``https``/``wss`` URL, None for a plain one (the argument
        ``urllib.request.urlopen(context=...)`` and ``websockets`` take)."""
        scheme = urlsplit(url).scheme
        return self.context() if scheme in ("https", "wss") else None

    def client_pair(self) -> tuple[bytes | None, bytes | None]:
        """(certificate chain, private key) as PEM bytes, or (None, None) without mTLS."""
        if not self.client_cert:
            return None, None
        chain = read_pem(self.client_cert, "--client-cert")
        key = read_pem(self.client_key, "--client-key") if self.client_key else chain
        return chain, key

    def to_args(self) -> list[str]:
        """The command-line options that give a child process these settings."""
        return path_args((("--ca", self.ca), ("--client-cert", self.client_cert),
                           ("--client-key", self.client_key))) + (
            ["--insecure"] if self.insecure else [])

    def to_env(self) -> dict[str, str]:
        """``{ENV: JSON}`` for a child process (read back by :meth:`from_env`); paths are
        absolute, so the child may run in another folder."""
        data = {k: (str(Path(v).resolve()) if isinstance(v, str) else v)
                for k, v in asdict(self).items()}
        return {ENV: json.dumps(data, sort_keys=True)}

    @classmethod
    def from_env(cls, environ: Any = None) -> ClientTls:
        """The settings :meth:`to_env` put in ``environ`` (default ``os.environ``); the
        defaults (verify against the system's CAs) when it is absent."""
        text = (os.environ if environ is None else environ).get(ENV, "")
        return cls(**json.loads(text)) if text else cls()

    def describe(self) -> str:
        """The settings in words (for run metadata and the verdict)."""
        if self.insecure:
            return "NOT verified (--insecure)"
        trust = f"CA {self.ca}" if self.ca else "the system's CAs"
        return f"verified against {trust}" + (
            f", client certificate {self.client_cert}" if self.client_cert else "")


@lru_cache(maxsize=16)
def _client_context(tls: ClientTls) -> ssl.SSLContext:
    """The cached client context of ``tls`` (see :meth:`ClientTls.context`)."""
    if tls.insecure:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    else:
        try:
            ctx = ssl.create_default_context(cafile=tls.ca)
        except (ssl.SSLError, OSError) as e:
            raise TlsError(f"--ca {tls.ca}: not a PEM CA certificate file ({short_reason(e)})") \
                from None
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if tls.client_cert:
        try:
            ctx.load_cert_chain(tls.client_cert, tls.client_key)
        except (ssl.SSLError, OSError) as e:
            key = f" / --client-key {tls.client_key}" if tls.client_key else ""
            raise TlsError(f"--client-cert {tls.client_cert}{key}: cannot load the client "
                           f"certificate and its key ({short_reason(e)})") from None
    return ctx


def path_args(pairs: tuple[tuple[str, str | None], ...]) -> list[str]:
    """``[flag, absolute path, ...]`` of the pairs whose path is set."""
    out: list[str] = []
    for flag, value in pairs:
        if value:
            out += [flag, str(Path(value).resolve())]
    return out


def read_pem(path: str | None, flag: str) -> bytes:
    """The bytes of ``path`` (TlsError naming ``flag`` if unreadable)."""
    try:
        return Path(str(path)).read_bytes()
    except OSError as e:
        raise TlsError(f"{flag} {path}: {e.strerror or e}") from None


def short_reason(e: BaseException) -> str:
    """The short reason of an ssl/OS error."""
    if isinstance(e, ssl.SSLError) and e.reason:
        return str(e.reason).lower().replace("_", " ")
    if isinstance(e, OSError) and e.strerror:
        return e.strerror
    return str(e) or type(e).__name__


# --------------------------------------------------------------------------- errors in one line

# What the remedies say (the problem first, then what to do).
UNKNOWN_CA = ("unknown CA: the server's certificate is not signed by a CA this client trusts "
              "(give --ca FILE with the CA that signed it; --insecure skips the check)")
SELF_SIGNED = ("unknown CA: the server's certificate is self-signed and not trusted (give "
               "--ca FILE with that certificate; --insecure skips the check)")
HOSTNAME = ("hostname mismatch: the server's certificate does not name the host in the URL "
            "(use a host name the certificate has)")
EXPIRED = "certificate expired: the server's certificate is past its end date"
NOT_YET = "certificate not yet valid: the server's certificate starts in the future"
CLIENT_REQUIRED = ("client certificate required: the server demands mutual TLS (give "
                   "--client-cert FILE --client-key FILE)")
CLIENT_REJECTED = ("client certificate rejected: the server does not trust the client "
                   "certificate given (is it signed by the server's --tls-client-ca?)")
CLIENT_REQUIRED_LIKELY = ("client certificate required (probably): the server closed the "
                          "connection right after the TLS handshake without answering, as a "
                          "server requiring mutual TLS does (give --client-cert FILE "
                          "--client-key FILE)")
CLIENT_REJECTED_LIKELY = ("client certificate rejected (probably): the server closed the "
                          "connection right after the TLS handshake without answering (is the "
                          "client certificate signed by the server's --tls-client-ca?)")
CLIENT_EXPIRED = "client certificate expired: the server refused the expired client certificate"
NOT_TLS = ("the server does not speak TLS on this port (an https:// URL for a plain-HTTP "
           "server? use http://)")
VERIFY_FAILED = "certificate verification failed"

# OpenSSL X509_V_ERR_* codes (ssl.SSLCertVerificationError.verify_code)
_VERIFY_CODES = {2: UNKNOWN_CA, 18: SELF_SIGNED, 19: UNKNOWN_CA, 20: UNKNOWN_CA,
                 21: UNKNOWN_CA, 9: NOT_YET, 10: EXPIRED, 62: HOSTNAME, 64: HOSTNAME}

# Substrings of error texts (OpenSSL reasons, BoringSSL/gRPC core, Python's own), lowercase,
# first match wins; the handshake alerts a *server* sends name the client's certificate.
_TEXTS: tuple[tuple[str, str], ...] = (
    ("certificate_required", CLIENT_REQUIRED),
    ("certificate required", CLIENT_REQUIRED),
    ("peer did not return a certificate", CLIENT_REQUIRED),
    ("alert certificate expired", CLIENT_EXPIRED),
    ("alert_certificate_expired", CLIENT_EXPIRED),
    ("alert unknown ca", CLIENT_REJECTED),
    ("alert_unknown_ca", CLIENT_REJECTED),
    ("alert bad certificate", CLIENT_REJECTED),
    ("alert_bad_certificate", CLIENT_REJECTED),
    ("hostname mismatch", HOSTNAME),
    ("ip address mismatch", HOSTNAME),
    ("peer name", HOSTNAME),  # gRPC core: "Peer name X is not in peer certificate"
    ("hostname verification check failed", HOSTNAME),  # gRPC core (grpcio >= 1.6x)
    ("certificate has expired", EXPIRED),
    ("certificate_expired", EXPIRED),
    ("certificate is not yet valid", NOT_YET),
    ("self-signed certificate", SELF_SIGNED),
    ("self signed certificate", SELF_SIGNED),
    ("unable to get local issuer", UNKNOWN_CA),
    ("unable to get issuer", UNKNOWN_CA),
    ("unable to verify the first certificate", UNKNOWN_CA),
    ("wrong version number", NOT_TLS),
    ("wrong_version_number", NOT_TLS),
    ("packet length too long", NOT_TLS),
    ("record layer failure", NOT_TLS),
    ("certificate_verify_failed", VERIFY_FAILED),
    ("certificate verify failed", VERIFY_FAILED),
)


def _chain(exc: BaseException) -> Iterator[Any]:
    """``exc`` and everything it wraps: causes, contexts, ``reason`` (urllib's URLError),
    exception arguments (httpx, websockets), bounded against cycles."""
    seen: set[int] = set()
    todo: list[Any] = [exc]
    while todo and len(seen) < 32:
        e = todo.pop(0)
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        yield e
        if isinstance(e, BaseException):
            todo += [e.__cause__, e.__context__, getattr(e, "reason", None)]
            todo += [a for a in e.args if isinstance(a, BaseException)]


def _text_of(e: Any) -> str:
    """Everything an exception says: its text, and a gRPC error's details/debug string."""
    parts = [str(e)]
    for attr in ("details", "debug_error_string"):
        fn = getattr(e, attr, None)
        if callable(fn):
            with contextlib.suppress(Exception):
                parts.append(str(fn()))
    return " ".join(parts).lower()


def problem(exc: BaseException) -> str | None:
    """The certificate/TLS problem behind ``exc`` in words (see the module doc), or None."""
    texts: list[str] = []
    for e in _chain(exc):
        if isinstance(e, ssl.SSLCertVerificationError):
            code = getattr(e, "verify_code", None)
            if code in _VERIFY_CODES:
                return _VERIFY_CODES[code]
            msg = getattr(e, "verify_message", None)
            if msg:
                return f"{VERIFY_FAILED}: {msg}"
        texts.append(_text_of(e))
    text = " ".join(texts)
    for needle, what in _TEXTS:
        if needle in text:
            return what
    return None


def describe(exc: BaseException, where: str = "") -> str | None:
    """ONE line naming the TLS problem behind ``exc`` (``TLS error talking to WHERE:
    PROBLEM``), or None when ``exc`` is no TLS failure (refused, timed out, ...)."""
    what = problem(exc)
    if what is None:
        return None
    return f"TLS error{f' talking to {where}' if where else ''}: {what}"


_ENDED = ("eof occurred in violation of protocol", "unexpected eof", "connection reset",
          "remote end closed connection", "server disconnected", "connection lost",
          "unexpected_eof", "peer closed connection", "socket closed")


def diagnose(url: str, client: ClientTls, timeout_s: float = 2.0) -> str | None:
    """Why the TLS server at ``url`` ends connections: a fresh handshake with ``client``'s
    context, then a read without sending anything, so the alert the server sends (client
    certificate required or rejected, with TLS 1.3 sent only after the client's handshake
    ended) is read rather than lost to a write that raced it.  A server that accepted the
    client waits for a request (the read times out: None) or, HTTP/2, speaks first (its
    SETTINGS: None); one that closes at once without an alert most likely refused the client
    certificate.  A ``grpcs://`` URL offers ALPN ``h2`` (a gRPC server closes a connection
    without it, which must not read as a refusal)."""
    parts = urlsplit(url)
    if parts.scheme not in ("https", "wss", "grpcs") or not parts.hostname:
        return None
    host, port = parts.hostname, parts.port or 443
    ctx = client.context()
    if parts.scheme == "grpcs":
        ctx = client.new_context()
        ctx.set_alpn_protocols(["h2"])
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as raw, \
                ctx.wrap_socket(raw, server_hostname=host) as s:
            s.settimeout(timeout_s)
            if s.recv(1):  # it spoke first: not a refusal
                return None
    except TimeoutError:
        return None
    except (OSError, ValueError) as e:
        what = problem(e)
        if what is not None or not _ended(e):
            return what
    # closed without an alert right after a good handshake (asyncio/uvloop servers refuse a
    # client certificate so): the likely cause, said as such
    return CLIENT_REJECTED_LIKELY if client.mutual else CLIENT_REQUIRED_LIKELY


def _ended(exc: BaseException) -> bool:
    """The connection was closed or reset without a reason (a TLS server's alert may
    have been lost)."""
    return any(isinstance(e, BaseException) and any(t in _text_of(e) for t in _ENDED)
               for e in _chain(exc))


def reason(exc: BaseException, where: str = "", client: ClientTls | None = None) -> str:
    """One line for any failed connection attempt to the URL ``where``: the TLS problem
    (:func:`describe`; a connection ended without a reason is re-tried once with
    :func:`diagnose` when ``client`` is given) or else the first line of the exception's
    text, with its type when it has no text."""
    line = describe(exc, where)
    if line is not None:
        return line
    if client is not None and where and _ended(exc):
        what = diagnose(where, client)
        if what is not None:
            return f"TLS error talking to {where}: {what}"
    inner = exc
    for e in _chain(exc):  # the innermost exception with a text says the most
        if isinstance(e, BaseException) and str(e).strip():
            inner = e
    text = str(inner).strip().splitlines()[0] if str(inner).strip() else type(inner).__name__
    return f"{where}: {text}" if where else text


# --------------------------------------------------------------------------- the shared options

CA = Option("--ca FILE", "CA certificates (PEM) that sign the servers' certificates (default: "
                         "the system's CAs)", pem_file)
CLIENT_CERT = Option("--client-cert FILE", "client certificate (PEM) presented to the servers "
                                           "(mutual TLS)", pem_file)
CLIENT_KEY = Option("--client-key FILE", "private key (PEM) of --client-cert (default: in the "
                                         "--client-cert file)", pem_file)
INSECURE = Option("--insecure", "do NOT verify server certificates (a loud warning in the "
                                "terminal and the verdict; tests of a throwaway setup only)",
                  action="store_true")
def add_client_tls(p: argparse.ArgumentParser, what: str = "connecting to servers") -> None:
    """``--ca``, ``--client-cert``, ``--client-key`` and ``--insecure``, in a group named
    after ``what`` the command connects to."""
    group = p.add_argument_group(f"TLS when {what}")
    for option in (CA, CLIENT_CERT, CLIENT_KEY, INSECURE):
        option.add(group)


def client_tls_from_args(args: argparse.Namespace) -> ClientTls:
    """The :class:`ClientTls` of parsed options, its files loaded once (TlsError if one does
    not)."""
    tls = ClientTls(ca=args.ca, client_cert=args.client_cert, client_key=args.client_key,
                    insecure=bool(args.insecure))
    tls.context()
    return tls
