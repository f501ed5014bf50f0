"""The server's own TLS: its certificate chain and key, and (mTLS) the CA client
certificates must chain to, read again when the files change.

Kubernetes updates a mounted Secret in place (cert-manager renews the certificate, a new
key is written), and a server runs for weeks: so the credentials are gRPC's dynamic ones,
whose fetcher gRPC calls before each new connection's handshake. ``CertificateFiles``
answers it from the files' metadata (``stat``, following the symlinks a Secret volume
swaps): unchanged, nothing is read; changed, the files are read, checked (the key must
match the certificate, the CA must parse) and handed over, so the next connection gets
the new certificate and open connections keep theirs. A set caught half-written (the new
certificate with the old key) is refused, logged and looked at again when a file changes
once more; the server keeps the last good set meanwhile.

Not Redis's TLS: that is ``redis.tls`` (``store/connect.py``).
"""

from __future__ import annotations

import hashlib
import logging
import os
import ssl
import threading
from dataclasses import dataclass
from pathlib import Path

import grpc

from conveyor.errors import InvalidArgument

log = logging.getLogger("conveyor.server")

Signature = tuple[tuple[int, int, int, int] | None, ...]


class CertificateError(InvalidArgument):
    """The certificate files cannot be used; the message names the key and the file."""


@dataclass(frozen=True)
class _Loaded:
    signature: Signature
    digest: bytes
    configuration: grpc.ServerCertificateConfiguration


def _stat(path: Path) -> tuple[int, int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


class CertificateFiles:
    """The files of ``tls.cert_file``, ``tls.key_file`` and ``tls.client_ca_file``."""

    def __init__(self, cert_file: str | Path, key_file: str | Path,
                 client_ca_file: str | Path | None = None) -> None:
        self.files = {"tls.cert_file": Path(cert_file), "tls.key_file": Path(key_file)}
        if client_ca_file is not None:
            self.files["tls.client_ca_file"] = Path(client_ca_file)
        self._lock = threading.Lock()
        self._current = self._load()
        self._refused: Signature | None = None
        #: How often a changed set was taken (tests and logs).
        self.reloads = 0

    @property
    def mutual(self) -> bool:
        """Whether clients must present a certificate."""
        return "tls.client_ca_file" in self.files

    def _signature(self) -> Signature:
        return tuple(_stat(path) for path in self.files.values())

    def signature(self) -> Signature:
        """The files' metadata now: another value means a file changed (the data port
        makes its own TLS context again then, ``data_port.py``)."""
        return self._signature()

    def _read(self) -> dict[str, bytes]:
        out = {}
        for key, path in self.files.items():
            try:
                out[key] = path.read_bytes()
            except OSError as exc:
                raise CertificateError(f"{key}: cannot read {str(path)!r}: "
                                       f"{exc.strerror or exc}") from None
        return out

    def _check(self) -> None:
        """The key matches the certificate; the CA parses (``ssl`` reads the paths)."""
        cert, key = self.files["tls.cert_file"], self.files["tls.key_file"]
        try:
            ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(cert, key)
        except (ssl.SSLError, OSError) as exc:
            raise CertificateError(f"tls.cert_file {str(cert)!r} and tls.key_file "
                                   f"{str(key)!r} are not a PEM certificate chain and its "
                                   f"private key: {exc}") from None
        ca = self.files.get("tls.client_ca_file")
        if ca is not None:
            try:
                ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_verify_locations(cafile=ca)
            except (ssl.SSLError, OSError) as exc:
                raise CertificateError(f"tls.client_ca_file {str(ca)!r} is not a PEM CA "
                                       f"certificate: {exc}") from None

    def _load(self) -> _Loaded:
        """Read and check the files; the bytes are read around the check and must agree,
        so what was checked is what is served."""
        signature = self._signature()
        before = self._read()
        self._check()
        if self._read() != before:
            raise CertificateError("the TLS files changed while they were read: "
                                   "trying again at the next connection")
        digest = hashlib.sha256(b"\0".join(before.values())).digest()
        configuration = grpc.ssl_server_certificate_configuration(
            [(before["tls.key_file"], before["tls.cert_file"])],
            root_certificates=before.get("tls.client_ca_file"))
        return _Loaded(signature, digest, configuration)

    def credentials(self) -> grpc.ServerCredentials:
        return grpc.dynamic_ssl_server_credentials(
            self._current.configuration, self.fetch,
            require_client_authentication=self.mutual)

    def fetch(self) -> grpc.ServerCertificateConfiguration | None:
        """gRPC's fetcher: a new configuration when the files changed, else None."""
        try:
            return self._refresh()
        except Exception:  # never into gRPC's handshake: keep serving the last good set
            log.exception("could not look at the TLS files again")
            return None

    def _refresh(self) -> grpc.ServerCertificateConfiguration | None:
        signature = self._signature()
        if signature in (self._current.signature, self._refused):
            return None
        with self._lock:
            try:
                loaded = self._load()
            except CertificateError as exc:
                self._refused = signature
                log.error("%s; serving the certificate read before", exc.message)
                return None
            changed = loaded.digest != self._current.digest
            self._current, self._refused = loaded, None
        if not changed:
            return None
        self.reloads += 1
        log.info("read the TLS certificate files again (%s): new connections get the new "
                 "certificate", ", ".join(str(p) for p in self.files.values()))
        return loaded.configuration
