"""A throwaway PKI for the TLS tests: CAs, server and client certificates written as PEM files.

Made with `cryptography` in memory; EC P-256 keys keep generation fast. Server certificates name
127.0.0.1 and localhost, as the loopback servers in the tests are reached.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from orchestrator.security.files import TlsFiles


@dataclass(frozen=True)
class Issued:
    cert: Path
    key: Path
    serial: int


class Authority:
    """A self-signed CA that issues certificates into `directory`."""

    def __init__(self, directory: Path, name: str) -> None:
        self.directory = directory
        self.name = name
        directory.mkdir(parents=True, exist_ok=True)
        self._key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = datetime.datetime.now(datetime.UTC)
        self._cert = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .sign(self._key, hashes.SHA256())
        )
        self.ca = directory / f"{name}-ca.pem"
        self.ca.write_bytes(self._cert.public_bytes(serialization.Encoding.PEM))

    def issue(self, name: str, *, server: bool, into: Path | None = None) -> Issued:
        """A leaf certificate and key, written as `<name>.pem` and `<name>.key` (overwriting)."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        serial = x509.random_serial_number()
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
            .issuer_name(self._cert.subject)
            .public_key(key.public_key())
            .serial_number(serial)
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        )
        if server:
            builder = builder.add_extension(
                x509.SubjectAlternativeName(
                    [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
                ),
                critical=False,
            )
        cert = builder.sign(self._key, hashes.SHA256())
        directory = into or self.directory
        directory.mkdir(parents=True, exist_ok=True)
        cert_path, key_path = directory / f"{name}.pem", directory / f"{name}.key"
        # Key first: a reader that sees the new certificate then finds its key in place.
        key_path.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        return Issued(cert_path, key_path, serial)


@dataclass(frozen=True)
class Pki:
    ca: Authority
    server: Issued
    client: Issued
    stranger_ca: Authority
    stranger_client: Issued

    def server_files(self, *, mutual: bool) -> TlsFiles:
        ca = self.ca.ca if mutual else None
        return TlsFiles(self.server.cert, self.server.key, ca, ca_role="client-ca")

    def client_files(self, *, stranger: bool = False, identity: bool = True) -> TlsFiles:
        issued = self.stranger_client if stranger else self.client
        if not identity:
            return TlsFiles(ca=self.ca.ca)
        return TlsFiles(issued.cert, issued.key, self.ca.ca)


def make_pki(root: Path) -> Pki:
    """Our CA with a server and a client certificate; another CA with a client certificate."""
    ca = Authority(root / "ours", "orchestrator-test-ca")
    stranger = Authority(root / "stranger", "stranger-ca")
    return Pki(
        ca=ca,
        server=ca.issue("server", server=True, into=root / "server"),
        client=ca.issue("router", server=False),
        stranger_ca=stranger,
        stranger_client=stranger.issue("router", server=False),
    )
