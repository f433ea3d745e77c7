"""Throwaway certificates: a private CA and the server and client certificates it signs.

``rtalab load run --tls`` serves its embedded deployment with them (the files go in the run
folder), and the tests make theirs at run time, never checked in.  Written with
``cryptography`` (docs/decisions.md says why): :func:`make_ca` makes a CA, :meth:`Ca.issue`
a server or client certificate (host names and IP addresses as subjectAltNames, validity
chosen so a test can make an expired one), :func:`make_pki` the usual set in one folder.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

LOCAL_NAMES = ("127.0.0.1", "localhost", "::1")
DAY = dt.timedelta(days=1)


def _key() -> ec.EllipticCurvePrivateKey:
    """A fresh P-256 key (fast to make, accepted by OpenSSL and gRPC's BoringSSL)."""
    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _write(path: Path, data: bytes, private: bool = False) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    if private:
        path.chmod(0o600)
    return path


def _san(names: Sequence[str]) -> x509.SubjectAlternativeName:
    """subjectAltName: IP addresses as IPAddress entries, the rest as DNS names."""
    entries: list[x509.GeneralName] = []
    for name in names:
        try:
            entries.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            entries.append(x509.DNSName(name))
    return x509.SubjectAlternativeName(entries)


@dataclass(frozen=True)
class Issued:
    """A certificate and its key, as PEM files."""

    cert: Path
    key: Path


@dataclass
class Ca:
    """A private certificate authority; :meth:`issue` signs leaf certificates."""

    name: str
    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate

    def pem(self) -> bytes:
        """The CA certificate as PEM."""
        return self.cert.public_bytes(serialization.Encoding.PEM)

    def write(self, path: Path) -> Path:
        """Write the CA certificate (what clients give as ``--ca`` / servers as
        ``--tls-client-ca``)."""
        return _write(path, self.pem())

    def issue(self, folder: Path, stem: str, names: Sequence[str] = LOCAL_NAMES, *,
              client: bool = False, not_before: dt.datetime | None = None,
              not_after: dt.datetime | None = None) -> Issued:
        """A leaf certificate ``stem.pem`` and key ``stem-key.pem`` in ``folder``: a server
        certificate for ``names`` (subjectAltName), or with ``client`` a client one (CN the
        first name).  Valid from a day ago for 30 days unless given."""
        now = dt.datetime.now(dt.UTC)
        key = _key()
        builder = (x509.CertificateBuilder()
                   .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME,
                                                               names[0] if names else stem)]))
                   .issuer_name(self.cert.subject)
                   .public_key(key.public_key())
                   .serial_number(x509.random_serial_number())
                   .not_valid_before(not_before or now - DAY)
                   .not_valid_after(not_after or now + 30 * DAY)
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None),
                                  critical=True)
                   .add_extension(x509.KeyUsage(
                       digital_signature=True, key_encipherment=False, content_commitment=False,
                       data_encipherment=False, key_agreement=False, key_cert_sign=False,
                       crl_sign=False, encipher_only=False, decipher_only=False), critical=True)
                   .add_extension(x509.ExtendedKeyUsage(
                       [ExtendedKeyUsageOID.CLIENT_AUTH if client
                        else ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
                   .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                       self.key.public_key()), critical=False)
                   .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                                  critical=False))
        if names:
            builder = builder.add_extension(_san(names), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        return Issued(_write(folder / f"{stem}.pem", cert.public_bytes(serialization.Encoding.PEM)),
                      _write(folder / f"{stem}-key.pem", _pem_key(key), private=True))


def make_ca(name: str = "rtalab throwaway CA", days: int = 30) -> Ca:
    """A new self-signed CA, valid from a day ago for ``days`` days."""
    key = _key()
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder()
            .subject_name(subject).issuer_name(subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - DAY).not_valid_after(now + days * DAY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(
                digital_signature=True, key_encipherment=False, content_commitment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=True,
                crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                           critical=False)
            .sign(key, hashes.SHA256()))
    return Ca(name, key, cert)


@dataclass(frozen=True)
class Pki:
    """The files of :func:`make_pki`."""

    ca: Path
    server: Issued
    client: Issued


def make_pki(folder: Path, names: Sequence[str] = LOCAL_NAMES) -> Pki:
    """A throwaway CA (``ca.pem``), a server certificate for ``names`` (``server.pem``,
    ``server-key.pem``) and a client certificate (``client.pem``, ``client-key.pem``) in
    ``folder``: enough for a mutual-TLS deployment on this host."""
    folder = Path(folder)
    ca = make_ca()
    return Pki(ca.write(folder / "ca.pem"), ca.issue(folder, "server", names),
               ca.issue(folder, "client", ("rtalab-load",), client=True))
