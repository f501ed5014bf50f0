"""Who is calling: the identity behind a call to the Conveyor service, or UNAUTHENTICATED.

Three modes, chosen by the configuration:

- **credentials** (``auth.tokens_file``, a legacy ``auth.token``, or ``tls.client_ca_file``):
  a caller is the identity of its bearer token (``authorization: Bearer TOKEN``), else of
  its verified client certificate (its first URI SAN, e.g. ``spiffe://...``, else its
  first DNS SAN). A wrong token is refused even with a certificate; no credentials at all
  are refused, wherever the call comes from.
- **loopback** (no credentials configured, authentication not disabled): like Redis's
  protected mode, clients on this host (loopback addresses, Unix sockets) are
  ``anonymous`` with every right, and every other peer is refused, naming what to
  configure. The server says so in its log at start.
- **disabled** (``auth.disabled: true``): every caller is ``anonymous`` with every right.

In the two anonymous modes everything belongs to one identity, as before authentication
existed. Identities listed in ``auth.operators`` may act on every pipeline (``access.py``).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

import grpc

from conveyor.errors import Unauthenticated
from conveyor.transport.channel import AUTHORIZATION_KEY
from conveyor_server.service.tokens import Tokens
from conveyor_server.store.store import ANONYMOUS

Mode = Literal["credentials", "loopback", "disabled"]
_BEARER = "bearer "


@dataclass(frozen=True)
class Caller:
    identity: str
    #: May act on every pipeline (an operator, or anyone when authentication is off).
    operator: bool
    #: How it was told: "token", "certificate", "loopback" or "disabled".
    by: str


def is_local_peer(peer: str) -> bool:
    """Whether gRPC's peer string (``ipv4:127.0.0.1:5000``, ``ipv6:[::1]:5000``,
    ``unix:...``) names a client on this host."""
    kind, _, rest = peer.partition(":")
    if kind in ("unix", "unix-abstract"):
        return True
    if kind not in ("ipv4", "ipv6"):
        return False
    host = rest.rpartition(":")[0].strip("[]")
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)
    return bool(address.is_loopback or (mapped is not None and mapped.is_loopback))


def certificate_identity(context: grpc.ServicerContext) -> str | None:
    """The identity of a verified client certificate: its first URI SAN, else its first
    DNS SAN; None without a certificate or without either."""
    auth = context.auth_context()
    for key in ("peer_uri", "peer_dns"):
        for value in auth.get(key, ()):
            name = value.decode(errors="replace") if isinstance(value, bytes) else str(value)
            if name:
                return name
    return None


class Authenticator:
    def __init__(self, *, disabled: bool = False, tokens: Tokens | None = None,
                 certificates: bool = False, operators: Iterable[str] = ()) -> None:
        """``tokens``: the tokens callers may present. ``certificates``: clients present
        certificates verified against the client CA (mTLS), which identify them."""
        self.tokens = tokens
        self.certificates = certificates
        self.operators = frozenset(operators)
        self.mode: Mode = ("disabled" if disabled else
                           "credentials" if tokens is not None or certificates else "loopback")

    def describe(self) -> str:
        """One line for the log at start: how callers are told apart."""
        if self.mode == "disabled":
            return ("authentication is disabled (auth.disabled: true): every client that "
                    "reaches the port may use and delete every pipeline")
        if self.mode == "loopback":
            return ("no credentials configured (auth.tokens_file, tls.client_ca_file): "
                    "accepting clients on this host only (loopback), as 'anonymous'; "
                    "clients from other hosts are refused with UNAUTHENTICATED")
        ways = []
        if self.tokens is not None:
            ways.append(f"bearer tokens ({len(self.tokens.names())} identities)")
        if self.certificates:
            ways.append("client certificates (URI or DNS SAN)")
        operators = ", ".join(sorted(self.operators)) or "none"
        return f"clients authenticate with {' or '.join(ways)}; operators: {operators}"

    def identify(self, context: grpc.ServicerContext) -> Caller:
        """The caller of this call; ``Unauthenticated`` saying what is missing."""
        if self.mode == "disabled":
            return Caller(ANONYMOUS, True, "disabled")
        if self.mode == "loopback":
            peer = context.peer() or ""
            if is_local_peer(peer):
                return Caller(ANONYMOUS, True, "loopback")
            raise Unauthenticated(
                f"this server accepts clients on its own host only: it has no credentials "
                f"configured, and the call came from {peer}. Configure auth.tokens_file "
                "(clients send a token) or tls.client_ca_file (clients present "
                "certificates), or set auth.disabled: true")
        presented = self._presented_token(context)
        if presented is not None:
            identity = self.tokens.identify(presented) if self.tokens is not None else None
            if identity is None:
                raise Unauthenticated("wrong token: it is not one of the server's tokens "
                                      "(auth.tokens_file)")
            return self._caller(identity, "token")
        if self.certificates:
            identity = certificate_identity(context)
            if identity is not None:
                return self._caller(identity, "certificate")
            raise Unauthenticated("the client certificate names no identity: it needs a URI "
                                  "SAN (spiffe://...) or a DNS SAN, or send a token")
        raise Unauthenticated("missing credentials: send a token (Client(token_file=...), "
                              "CONVEYOR_TOKEN_FILE, conveyor --token-file)")

    def _caller(self, identity: str, by: str) -> Caller:
        return Caller(identity, identity in self.operators, by)

    @staticmethod
    def _presented_token(context: grpc.ServicerContext) -> str | None:
        for key, value in context.invocation_metadata() or ():
            if key == AUTHORIZATION_KEY:
                text = value.decode(errors="replace") if isinstance(value, bytes) else value
                if text[:len(_BEARER)].lower() == _BEARER:
                    return text[len(_BEARER):].strip()
                return text.strip()
        return None
