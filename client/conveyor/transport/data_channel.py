"""The data channel: a call's batch bytes on a TCP connection of their own, outside gRPC.

gRPC turns every message it receives into Python bytes, which the receiver then copies into
the batch's buffer: two copies of every byte beside the kernel's. On a data channel the
bytes go from the kernel's socket straight into the batch's one writable buffer
(``recv_into``). gRPC stays the control plane: the call, its authentication, the batch
headers, acknowledgements, asked ranges and errors.

**Wire.** A caller asks for a channel in the first request of its call
(``StreamBatchesRequest.data_channel``, ``ComputeStart.data_channel``). A server with a data
port answers, once the call passed authentication and authorisation, with an offer (the
call's first response): a single-use 32-byte random ticket bound to that call, the port
and how long the ticket lasts. The client connects to the host its gRPC channel reaches,
at that port (TLS with the same CA, client certificate and expected server name when the
client has ``TlsOptions``), sends ``HELLO`` and the ticket, and reads ``READY``. From then
on every batch comes as a gRPC frame holding its header alone, and its ``total_bytes``
follow on the channel, in batch order.

**Failure.** A channel that breaks or ends inside a batch ends the call as a broken gRPC
stream does (``Unavailable``: the stream's failover, the fan-in's give-back). A channel that
cannot be attached (no route to the port, a proxy that passes gRPC alone, a refused
handshake) is ``Unreachable``: the caller's connection turns the channel off for that
server, says so once in the log, and the call is made again with the data in the frames.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import struct
import threading
import weakref
from collections.abc import Sequence

import numpy as np

from conveyor.errors import Unavailable
from conveyor.transport.credentials import TlsOptions, expected_name
from conveyor.v1 import service_pb2

#: The hello's magic and version, then the ticket; the server's answer when attached.
MAGIC = b"CVD"
VERSION = 1
HELLO = MAGIC + bytes([VERSION])
READY = HELLO + b"\x00"
TICKET_BYTES = 32
#: The longest a client waits to connect and attach (also bounded by the ticket's life).
CONNECT_S = 3.0


class Unreachable(Exception):
    """The offered channel could not be attached; the message says why."""


class Attempt:
    """One attach under way, which another thread may abort (its stream or fan-in being
    closed): the socket it holds is shut down, a read or handshake blocked on it ends, and
    ``Dialer.attach`` raises ``Unavailable``. Without it, a server that stopped between its
    offer and its answer would hold the closing caller for the whole connect time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._aborted = False

    def hold(self, sock: socket.socket, where: str) -> None:
        """The socket the attach uses now; ``Unavailable`` if it was aborted already."""
        with self._lock:
            self.check(where)
            self._sock = sock

    def check(self, where: str) -> None:
        """``Unavailable`` if the attempt was aborted."""
        if self._aborted:
            raise Unavailable(f"the data channel at {where} was not attached: its call is "
                              "being closed")

    def abort(self) -> None:
        """Any thread; at most once useful, harmless after the attach."""
        with self._lock:
            self._aborted = True
            sock, self._sock = self._sock, None
        if sock is not None:
            with contextlib.suppress(OSError):
                socket.socket.shutdown(sock, socket.SHUT_RDWR)


class ChannelEnd:
    """One end of an attached channel (the client's ``DataSocket``, the server's sink):
    ``abort`` wakes a read or send blocked on it from any thread, ``close`` closes it once.
    An end dropped without ``close`` (its stream collected) closes its socket with it."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._lock = threading.Lock()
        self._closed = False
        self._finalizer = weakref.finalize(self, sock.close)

    def abort(self) -> None:
        """Wake a read or send blocked on another thread (it fails); any thread."""
        with self._lock:
            if not self._closed:
                with contextlib.suppress(OSError):
                    socket.socket.shutdown(self._sock, socket.SHUT_RDWR)

    def close(self) -> None:
        """Close the socket (on the thread that uses it, or once it no longer does)."""
        self.abort()
        with self._lock:
            if not self._closed:
                self._closed = True
                self._finalizer()


class DataSocket(ChannelEnd):
    """The receiving end of an attached channel.

    A plaintext channel reads each batch with one ``recv_into(..., MSG_WAITALL)`` on a
    blocking socket (the kernel returns once the whole batch is in, not at every segment),
    its silence bounded by ``SO_RCVTIMEO``; a TLS one reads record by record."""

    def __init__(self, sock: socket.socket, where: str, idle_s: float) -> None:
        super().__init__(sock)
        self.where = where
        self._flags = 0
        if isinstance(sock, ssl.SSLSocket):
            sock.settimeout(idle_s)
        else:
            sock.settimeout(None)
            seconds = int(idle_s)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack(
                "ll", seconds, int((idle_s - seconds) * 1_000_000)))
            self._flags = socket.MSG_WAITALL

    def read_into(self, buffer: np.ndarray) -> None:
        """Fill ``buffer`` (a writable uint8 array) from the channel; ``Unavailable`` when
        the channel ends or breaks before it is full, or stays silent past its timeout
        (``EAGAIN`` from a plaintext one)."""
        view = memoryview(buffer.data)
        size, filled = len(view), 0
        recv_into, flags = self._sock.recv_into, self._flags
        try:
            while filled < size:
                got = recv_into(view[filled:], 0, flags)
                if not got:
                    raise Unavailable(f"the data channel of {self.where} ended after "
                                      f"{filled} of a batch's {size} bytes")
                filled += got
        except OSError as exc:  # reset, timeout (a silent server), closed under us
            raise Unavailable(f"the data channel of {self.where} broke after {filled} of a "
                              f"batch's {size} bytes: {exc}") from None


def _recv_exactly(sock: socket.socket, count: int) -> bytes:
    out = b""
    while len(out) < count:
        got = sock.recv(count - len(out))
        if not got:
            break
        out += got
    return out


class Dialer:
    """Attaches offered channels for one server address, as its gRPC channel reaches it."""

    def __init__(self, address: str, tls: TlsOptions | None, targets: Sequence[str],
                 idle_s: float) -> None:
        """``idle_s``: a read that gets no byte for this long fails (a stopped server)."""
        self.address = address
        self.host = address.rpartition(":")[0].strip("[]") or address
        self._tls = tls
        self._targets = targets
        self._idle_s = idle_s
        self._context: ssl.SSLContext | None = None

    def _ssl(self, tls: TlsOptions) -> ssl.SSLContext:
        if self._context is None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            context.minimum_version = ssl.TLSVersion.TLSv1_2
            if tls.ca_file:
                context.load_verify_locations(cafile=tls.ca_file)
            else:
                context.load_default_certs()
            if tls.cert_file and tls.key_file:
                context.load_cert_chain(tls.cert_file, tls.key_file)
            self._context = context
        return self._context

    def attach(self, offer: service_pb2.DataChannelOffer,
               attempt: Attempt | None = None) -> DataSocket:
        """Connect to the offered port, present the ticket and wait for the server's
        answer; ``Unreachable`` saying why when any of it fails, ``Unavailable`` when
        ``attempt`` was aborted meanwhile."""
        attempt = attempt or Attempt()
        if len(offer.ticket) != TICKET_BYTES or not 0 < offer.port < 65536:
            raise Unreachable(f"the server offered a malformed data channel (port "
                              f"{offer.port}, a ticket of {len(offer.ticket)} bytes)")
        within = min(CONNECT_S, max(0.1, offer.expires_ms / 1000))
        where = f"{self.host}:{offer.port}"
        sock: socket.socket | None = None
        try:
            sock = socket.create_connection((self.host, offer.port), timeout=within)
            attempt.hold(sock, where)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
            if self._tls is not None:
                name = expected_name(self._tls, self.address, self._targets) or self.host
                sock = self._ssl(self._tls).wrap_socket(sock, server_hostname=name)
                attempt.hold(sock, where)
            sock.sendall(HELLO + offer.ticket)
            answer = _recv_exactly(sock, len(READY))
            attempt.check(where)  # (aborted while it waited: the answer was cut short)
            if answer != READY:
                raise Unreachable(f"the data port {where} refused the ticket (answered "
                                  f"{answer!r})")
        except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
            if sock is not None:
                sock.close()
            attempt.check(where)  # aborted: not the port's fault
            raise Unreachable(f"cannot attach the data channel at {where}: {exc}") from None
        except (Unreachable, Unavailable):
            if sock is not None:
                sock.close()
            raise
        return DataSocket(sock, where, self._idle_s)
