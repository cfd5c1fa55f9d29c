"""Certificates made at run time: a CA, and the serving and client certificates it signs.

The operator's development webhook and self-signed /metrics use it (lessor/admission/server.py), and so does the
local control plane (lessor/tools/controlplane/run.py, with `service_account_key`), which imports it from here:
the runtime never imports the tools."""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_VALIDITY = dt.timedelta(days=365)

# A serving folder's files, as cert-manager and Kubernetes TLS Secrets name them; every TLS server of
# lessor's (the webhook, /metrics, the Jumpstarter gRPC port) reads its folder by these names.
CERT_FILE = "tls.crt"
KEY_FILE = "tls.key"
CA_FILE = "ca.crt"
CA_KEY_FILE = "ca.key"  # a kept development CA's key (`CertificateAuthority.kept_in`)
DEVELOPMENT_HOSTS = ("127.0.0.1", "localhost")
"""What a development certificate names, when no folder is given."""


@dataclass(frozen=True)
class KeyPair:
    cert_pem: bytes
    key_pem: bytes

    def write(self, directory: Path, stem: str) -> tuple[Path, Path]:
        cert, key = directory / f"{stem}.crt", directory / f"{stem}.key"
        cert.write_bytes(self.cert_pem)
        key.write_bytes(self.key_pem)
        key.chmod(0o600)
        return cert, key


def _key_pem(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _public(key: object) -> bytes:
    assert isinstance(key, ec.EllipticCurvePublicKey | rsa.RSAPublicKey)
    return key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)


def _name(common_name: str, organization: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(attrs)


class CertificateAuthority:
    """A self-signed CA that signs the serving and client certificates of one control plane."""

    def __init__(self, common_name: str = "lessor-local-ca", *,
                 kept: tuple[ec.EllipticCurvePrivateKey, x509.Certificate] | None = None) -> None:
        if kept is not None:
            self._key, self._cert = kept
            return
        self._key = ec.generate_private_key(ec.SECP256R1())
        now = dt.datetime.now(dt.UTC)
        self._cert = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name))
            .issuer_name(_name(common_name))
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + _VALIDITY * 10)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True, key_cert_sign=True, crl_sign=True,
                    content_commitment=False, key_encipherment=False, data_encipherment=False,
                    key_agreement=False, encipher_only=False, decipher_only=False,
                ),
                critical=True,
            )
            # Key identifiers: Python 3.13's default TLS context checks strictly (VERIFY_X509_STRICT) and refuses
            # a chain whose certificates lack them ("Missing Authority Key Identifier"), as RFC 5280 asks.
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(self._key.public_key()), critical=False)
            .sign(self._key, hashes.SHA256())
        )

    @classmethod
    def kept_in(cls, directory: Path, common_name: str) -> CertificateAuthority:
        """The CA kept in `directory` (`ca.crt`, `ca.key`), made and written there if it is missing, unreadable
        or expired: what a development server's clients were told to trust stays valid across its restarts."""
        cert_path, key_path = directory / CA_FILE, directory / CA_KEY_FILE
        try:
            cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
            key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
            if (isinstance(key, ec.EllipticCurvePrivateKey) and cert.not_valid_after_utc > dt.datetime.now(dt.UTC)
                    and _public(cert.public_key()) == _public(key.public_key())):
                return cls(common_name, kept=(key, cert))
        except (OSError, ValueError):
            pass
        ca = cls(common_name)
        directory.mkdir(parents=True, exist_ok=True)
        for path, data, mode in ((key_path, _key_pem(ca._key), 0o600), (cert_path, ca.cert_pem, 0o644)):
            temporary = path.with_name(f".{path.name}.{os.getpid()}")  # whole files only: another start may read
            temporary.write_bytes(b"")
            temporary.chmod(mode)
            temporary.write_bytes(data)
            os.replace(temporary, path)
        return ca

    @property
    def cert_pem(self) -> bytes:
        return self._cert.public_bytes(serialization.Encoding.PEM)

    def issue(
        self,
        common_name: str,
        *,
        organization: str | None = None,
        hosts: tuple[str, ...] = (),
        server: bool = False,
        client: bool = False,
    ) -> KeyPair:
        """Issue a leaf certificate; `hosts` become DNS or IP subject alternative names."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = dt.datetime.now(dt.UTC)
        usages = ([ExtendedKeyUsageOID.SERVER_AUTH] if server else []) + (
            [ExtendedKeyUsageOID.CLIENT_AUTH] if client else []
        )
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name, organization))
            .issuer_name(self._cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + _VALIDITY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self._key.public_key()), critical=False)
        )
        if hosts:
            builder = builder.add_extension(
                x509.SubjectAlternativeName([_san(h) for h in hosts]), critical=False
            )
        cert = builder.sign(self._key, hashes.SHA256())
        return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def _san(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def service_account_key() -> KeyPair:
    """An RSA key pair for signing service-account tokens (public part in `cert_pem`)."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return KeyPair(public, _key_pem(key))
