"""How a client proves who it is and checks whom it talks to: TLS options and the token.

``TlsOptions(ca_file, cert_file, key_file, server_name)``: verify the server's certificate
against ``ca_file`` and, for a server that requires client certificates (mTLS), present
``cert_file`` / ``key_file``. Every server of a deployment shares one certificate, issued
for the Service's DNS name; the client reaches servers by IP address too (a headless
Service's answers, a pipeline's holder), so a server reached by IP is verified against
``server_name``, by default the host of the client's first target when that is a DNS name.

The token is never needed on a command line: it comes from the argument, a file
(``token_file``, ``CONVEYOR_TOKEN_FILE``; ``-`` reads standard input) or the environment
(``CONVEYOR_TOKEN``), first found wins. ``TlsOptions.from_env`` reads ``CONVEYOR_TLS_CA``,
``CONVEYOR_TLS_CERT``, ``CONVEYOR_TLS_KEY`` and ``CONVEYOR_TLS_SERVER_NAME``.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from conveyor.errors import InvalidArgument

TOKEN_ENV = "CONVEYOR_TOKEN"
TOKEN_FILE_ENV = "CONVEYOR_TOKEN_FILE"
#: TlsOptions field -> the environment variable ``from_env`` reads it from.
TLS_ENV = {"ca_file": "CONVEYOR_TLS_CA", "cert_file": "CONVEYOR_TLS_CERT",
           "key_file": "CONVEYOR_TLS_KEY", "server_name": "CONVEYOR_TLS_SERVER_NAME"}


def _read(path: str, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise InvalidArgument(f"{what}: cannot read {path!r}: {exc.strerror or exc}") from None


@dataclass(frozen=True)
class TlsOptions:
    """TLS to the servers: the CA that signed their certificate, and optionally this
    client's certificate and key (servers with ``tls.client_ca_file`` require one)."""

    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    #: The name the servers' certificate is checked against when a server is reached by IP.
    server_name: str | None = None

    def __post_init__(self) -> None:
        if (self.cert_file is None) != (self.key_file is None):
            raise InvalidArgument("TlsOptions: give cert_file and key_file together (the "
                                  "client certificate and its private key)")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> TlsOptions | None:
        """The options the ``CONVEYOR_TLS_*`` variables give, or None when none is set."""
        env = os.environ if env is None else env
        given = {field: env[name] for field, name in TLS_ENV.items() if env.get(name)}
        return cls(**given) if given else None

    def credentials(self) -> grpc.ChannelCredentials:
        """Channel credentials with the files read now (a rotated file is read again by the
        next ``Client``)."""
        root = _read(self.ca_file, "TLS CA file") if self.ca_file else None
        key = _read(self.key_file, "TLS key file") if self.key_file else None
        chain = _read(self.cert_file, "TLS certificate file") if self.cert_file else None
        return grpc.ssl_channel_credentials(root, key, chain)


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return True


def _host(address: str) -> str:
    return address.rpartition(":")[0].strip("[]") or address


def expected_name(tls: TlsOptions, address: str, targets: Sequence[str]) -> str | None:
    """The name to verify the certificate of the server at ``address`` against, when it is
    not the address's own host: ``server_name``, else (a server reached by IP) the first
    target's host if that is a DNS name."""
    if tls.server_name:
        return tls.server_name
    first = _host(targets[0]) if targets else ""
    if _is_ip(_host(address)) and first and not _is_ip(first):
        return first
    return None


def open_channel(address: str, tls: TlsOptions | None, options: Sequence[tuple[str, Any]] = (),
                 targets: Sequence[str] = ()) -> grpc.Channel:
    """A channel to ``address``: plaintext without ``tls``, else TLS as its options say."""
    if tls is None:
        return grpc.insecure_channel(address, options=list(options))
    name = expected_name(tls, address, targets)
    extra = [("grpc.ssl_target_name_override", name)] if name else []
    return grpc.secure_channel(address, tls.credentials(), options=[*options, *extra])


def read_token(token: str | None = None, token_file: str | None = None,
               env: Mapping[str, str] | None = None) -> str | None:
    """The bearer token to send: ``token``, else the contents of ``token_file``, else of
    ``$CONVEYOR_TOKEN_FILE``, else ``$CONVEYOR_TOKEN``; None without any. A file that
    cannot be read, or is empty, is an error naming it (never a silent anonymous call)."""
    env = os.environ if env is None else env
    if token:
        return token
    path = token_file or env.get(TOKEN_FILE_ENV) or None
    if path is not None:
        where = "token file (standard input)" if path == "-" else f"token file {path!r}"
        try:
            text = sys.stdin.read() if path == "-" else Path(path).read_text()
        except OSError as exc:
            raise InvalidArgument(f"cannot read the {where}: {exc.strerror or exc}") from None
        if not text.strip():
            raise InvalidArgument(f"the {where} is empty")
        return text.strip()
    return env.get(TOKEN_ENV) or None


def add_tls_arguments(parser: argparse.ArgumentParser) -> None:
    """``--tls-ca``, ``--tls-cert``, ``--tls-key``, ``--tls-server-name`` (each defaulting
    to its ``CONVEYOR_TLS_*`` variable), for the command lines that reach a server."""
    group = parser.add_argument_group("TLS (plaintext when no CA is given)")
    for field, flag, text in (
            ("ca_file", "--tls-ca", "CA certificate that signed the server's certificate"),
            ("cert_file", "--tls-cert", "this client's certificate (mTLS)"),
            ("key_file", "--tls-key", "this client's private key (mTLS)"),
            ("server_name", "--tls-server-name",
             "name in the server's certificate, when the address is an IP")):
        group.add_argument(flag, dest=f"tls_{field}", metavar="FILE" if field != "server_name"
                           else "NAME", default=os.environ.get(TLS_ENV[field]) or None,
                           help=f"{text} (env {TLS_ENV[field]})")


def tls_from_args(args: argparse.Namespace) -> TlsOptions | None:
    """The ``TlsOptions`` the flags of ``add_tls_arguments`` give; None for plaintext."""
    given = {field: getattr(args, f"tls_{field}") for field in TLS_ENV}
    if not any(given.values()):
        return None
    return TlsOptions(**given)
