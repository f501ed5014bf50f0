"""The server's security from its configuration: TLS, who callers are, and the server's
own calls at start-up.

- ``check_security``: what the types do not say (files given in pairs, a disabled
  authentication that is also given tokens, owners of start-up pipelines), refused with the
  key's path.
- ``build_security``: the TLS credentials (``service/tls.py``: read again when the files
  change) and the ``Authenticator`` (``service/identity.py``), with the files read and
  checked now, so a bad certificate or tokens file stops the server before it listens.
- ``StartupCalls``: the pipelines of the configuration are created through the server's
  own API, over a private plaintext socket (an abstract Unix socket: no TLS, no client
  certificate to present to itself), as their ``owner``: each owner gets a random token
  that lives in memory until the start-up is over.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import grpc

from conveyor.client import Client
from conveyor_server.app.config import ConfigError, ServerConfig
from conveyor_server.service.identity import Authenticator
from conveyor_server.service.tls import CertificateFiles
from conveyor_server.service.tokens import TokenFileError, Tokens, check_identity

log = logging.getLogger("conveyor.server")
#: The identity of the single token of ``auth.token`` / ``auth.token_file`` (older keys).
LEGACY_IDENTITY = "default"


def check_security(cfg: ServerConfig) -> None:
    err = ConfigError
    tls, auth = cfg.tls, cfg.auth
    if (tls.cert_file is None) != (tls.key_file is None):
        raise err("tls: give cert_file and key_file together (the server's certificate "
                  "chain and its private key)")
    if tls.client_ca_file is not None and tls.cert_file is None:
        raise err("tls.client_ca_file: client certificates need TLS: set tls.cert_file and "
                  "tls.key_file too")
    if auth.token and auth.token_file:
        raise err("auth: give token or token_file, not both")
    if auth.disabled and (auth.tokens_file or auth.token or auth.token_file):
        raise err("auth.disabled: true, but tokens are configured (auth.tokens_file, "
                  "auth.token, auth.token_file): remove one or the other")
    try:
        for i, name in enumerate(auth.operators):
            check_identity(name, f"auth.operators[{i}]")
        for i, entry in enumerate(cfg.pipelines):
            if entry.owner is not None:
                check_identity(entry.owner, f"pipelines[{i}].owner")
    except TokenFileError as exc:
        raise err(exc.message) from None
    if _has_credentials(cfg) and not auth.disabled:
        for i, entry in enumerate(cfg.pipelines):
            if entry.owner is None:
                raise err(f"pipelines[{i}].owner: required when clients authenticate (the "
                          f"identity that may use {entry.name!r} besides the operators)")


def _has_credentials(cfg: ServerConfig) -> bool:
    auth = cfg.auth
    return bool(auth.tokens_file or auth.token or auth.token_file or cfg.tls.client_ca_file)


def _legacy_token(cfg: ServerConfig) -> str | None:
    if cfg.auth.token_file is None:
        return cfg.auth.token
    try:
        token = Path(cfg.auth.token_file).read_text().strip()
    except OSError as exc:
        raise ConfigError(f"auth.token_file: cannot read {cfg.auth.token_file!r}: "
                          f"{exc.strerror or exc}") from None
    if not token:
        raise ConfigError(f"auth.token_file: {cfg.auth.token_file!r} is empty")
    return token


@dataclass
class Security:
    authenticator: Authenticator
    #: The server's TLS files, None for plaintext.
    certificates: CertificateFiles | None

    @property
    def credentials(self) -> grpc.ServerCredentials | None:
        return self.certificates.credentials() if self.certificates is not None else None

    def log_summary(self, listen: str) -> None:
        """What a reader of the log needs to know at start: who may call, over what."""
        auth = self.authenticator
        if auth.mode == "disabled":
            log.warning(auth.describe())
        elif auth.mode == "loopback" and not _loopback(listen):
            log.warning("%s (listening on %s)", auth.describe(), listen)
        else:
            log.info(auth.describe())
        if self.certificates is None:
            if auth.mode == "credentials":
                log.warning("TLS is off (no tls.cert_file): tokens and batches travel in "
                            "plaintext; anyone on the path can read and reuse a token")
            return
        files = self.certificates.files
        log.info("TLS on with certificate %s%s", files["tls.cert_file"],
                 f"; client certificates required, verified against "
                 f"{files['tls.client_ca_file']}" if self.certificates.mutual else "")


def _loopback(listen: str) -> bool:
    host = listen.rpartition(":")[0].strip("[]")
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def build_security(cfg: ServerConfig) -> Security:
    """Read and check the TLS and tokens files now; errors name the key and the file."""
    auth = cfg.auth
    certificates = None
    if cfg.tls.cert_file is not None and cfg.tls.key_file is not None:
        certificates = CertificateFiles(cfg.tls.cert_file, cfg.tls.key_file,
                                        cfg.tls.client_ca_file)
    tokens = None
    legacy = _legacy_token(cfg)
    if auth.tokens_file is not None or legacy is not None:
        tokens = Tokens(auth.tokens_file, {LEGACY_IDENTITY: legacy} if legacy else None)
    authenticator = Authenticator(disabled=auth.disabled, tokens=tokens,
                                  certificates=cfg.tls.client_ca_file is not None,
                                  operators=auth.operators)
    return Security(authenticator, certificates)


class StartupCalls:
    """The server's own calls for the pipelines of its configuration: a private socket,
    and one in-memory token per owner while they run."""

    def __init__(self, authenticator: Authenticator) -> None:
        self.address = f"unix-abstract:conveyor-{os.getpid()}-{secrets.token_hex(8)}"
        self._authenticator = authenticator
        self._tokens: dict[str, str] = {}

    def bind(self, server: grpc.Server) -> None:
        if server.add_insecure_port(self.address) == 0:
            raise OSError(f"cannot bind the start-up socket {self.address}")

    @contextmanager
    def clients(self, owners: set[str | None]) -> Iterator[dict[str | None, Client]]:
        """A client per owner (None: no identity needed); the tokens are forgotten after."""
        auth = self._authenticator
        named = auth.mode == "credentials"
        if named and auth.tokens is None:
            auth.tokens = Tokens()  # client certificates only: the start-up tokens alone
        out: dict[str | None, Client] = {}
        try:
            for owner in owners:
                token = None
                if named and owner is not None:
                    token = self._tokens[owner] = secrets.token_urlsafe(32)
                    assert auth.tokens is not None
                    auth.tokens.add(owner, token)
                # Not placed: the configured pipelines are this server's own.
                out[owner] = Client(self.address, token=token, tls=False, timeout=60,
                                    place=False)
            yield out
        finally:
            for client in out.values():
                client.close()
            for owner, token in self._tokens.items():
                if auth.tokens is not None:
                    auth.tokens.remove(owner, token)
            self._tokens.clear()
