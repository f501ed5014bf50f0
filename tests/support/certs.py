"""Real X.509 certificates for the TLS tests, made with ``cryptography``: a CA, server
certificates (SANs 127.0.0.1 and localhost by default) and client certificates whose
identity is a DNS or URI SAN (``spiffe://...``), written as PEM files."""

from __future__ import annotations

import datetime
import ipaddress
import ssl
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_DAY = datetime.timedelta(days=1)


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _san(name: str) -> x509.GeneralName:
    """``spiffe://...`` (any ``scheme://``) is a URI SAN, an address an IP SAN, else DNS."""
    if "://" in name:
        return x509.UniformResourceIdentifier(name)
    try:
        return x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        return x509.DNSName(name)


@dataclass(frozen=True)
class Issued:
    """A certificate and its key, as PEM, and its serial number."""
    cert_pem: bytes
    key_pem: bytes
    serial: int

    def write(self, cert: Path, key: Path) -> tuple[Path, Path]:
        cert.write_bytes(self.cert_pem)
        key.write_bytes(self.key_pem)
        return cert, key


class CertificateAuthority:
    def __init__(self, name: str = "Conveyor test CA") -> None:
        self._key = _key()
        self._name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = datetime.datetime.now(datetime.UTC)
        self.cert = (
            x509.CertificateBuilder().subject_name(self._name).issuer_name(self._name)
            .public_key(self._key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - _DAY).not_valid_after(now + 30 * _DAY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=True,
                crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
            .sign(self._key, hashes.SHA256()))
        self.cert_pem = self.cert.public_bytes(serialization.Encoding.PEM)

    def write(self, path: Path) -> Path:
        path.write_bytes(self.cert_pem)
        return path

    def issue(self, *names: str, client: bool = False) -> Issued:
        """A leaf certificate for ``names`` (SANs), for a server or (``client``) a client."""
        key = _key()
        now = datetime.datetime.now(datetime.UTC)
        usage = ExtendedKeyUsageOID.CLIENT_AUTH if client else ExtendedKeyUsageOID.SERVER_AUTH
        serial = x509.random_serial_number()
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]) \
            if names and "://" not in names[0] else x509.Name([])
        builder = (
            x509.CertificateBuilder().subject_name(subject).issuer_name(self._name)
            .public_key(key.public_key()).serial_number(serial)
            .not_valid_before(now - _DAY).not_valid_after(now + 7 * _DAY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False))
        if names:
            builder = builder.add_extension(
                x509.SubjectAlternativeName([_san(n) for n in names]), critical=not subject)
        cert = builder.sign(self._key, hashes.SHA256())
        return Issued(cert.public_bytes(serialization.Encoding.PEM), _pem_key(key), serial)


def peer_serial(host: str, port: int, ca: Path, timeout: float = 10.0) -> int:
    """The serial number of the certificate a TLS server presents on a new connection
    (verified against ``ca``), read with the ``ssl`` module."""
    import socket

    context = ssl.create_default_context(cafile=str(ca))
    context.set_alpn_protocols(["h2"])
    with socket.create_connection((host, port), timeout=timeout) as raw, \
            context.wrap_socket(raw, server_hostname=host) as tls:
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return int(x509.load_der_x509_certificate(der).serial_number)
