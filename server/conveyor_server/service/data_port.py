"""The data port: where batch calls' data channels attach (``conveyor/transport/data_channel.py``).

A StreamBatches or ComputeBatches call that asks for a data channel gets, once it passed
authentication and authorisation, an offer: a single-use ticket of 32 random bytes
(``secrets``) bound to that call alone, valid for ``handshake_s``. The client connects to
this port (TLS with the gRPC port's certificate and key when the server has TLS; with
mTLS the client's certificate is required and verified against the same CA), sends the
hello with the ticket, and the port hands the socket to the call that holds the ticket;
that call then writes each batch's bytes on it (``DataSink``), its header going as a gRPC
frame. A call never writes on a socket but its own ticket's.

Bounds: at most ``max_pending`` tickets wait at once (beyond, calls are offered nothing
and get their data in frames); at most ``max_handshakes`` connections that have not
presented a valid ticket are open at once (beyond, new ones are closed at once); each has
``handshake_s`` in all to complete TLS and the hello, or it is closed. A wrong, expired or
reused ticket, a malformed hello or a failed TLS handshake closes the connection, and is
counted (``refusals``) and logged.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import secrets
import socket
import ssl
import threading
import time
from collections import Counter
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from pathlib import Path

import grpc

from conveyor.errors import Unavailable
from conveyor.tensor_list import TensorList
from conveyor.transport.data_channel import HELLO, READY, TICKET_BYTES, ChannelEnd
from conveyor.transport.wire import batch_header, encode_frames, header_frame
from conveyor.v1 import service_pb2
from conveyor_server.service.tls import CertificateFiles

log = logging.getLogger("conveyor.server")
#: How often the listener looks for handshakes past their time, and a waiting call for
#: its channel, a cancellation or a gone caller (seconds).
TICK_S = 0.1
#: Pieces handed to one ``sendmsg`` (below the kernel's IOV_MAX of 1024).
MAX_IOV = 512
#: How long a send that found its channel broken waits for its call's end before it says
#: UNAVAILABLE (seconds). A caller that closes cancels its call first and one whose channel
#: broke cancels it at once, so the wait is short; whichever way it ends is the call's
#: status (a close is CANCELLED, not UNAVAILABLE, in the metrics and the logs).
CALL_END_WAIT_S = 2.0


@dataclass(frozen=True)
class DataPortSettings:
    #: Host and port to listen on (port 0: a free one); the offer names the port.
    host: str = "0.0.0.0"
    port: int = 0
    max_pending: int = 256
    max_handshakes: int = 64
    handshake_s: float = 5.0


class DataSink(ChannelEnd):
    """The sending end of an attached channel, written by its call's send loop alone."""

    def __init__(self, sock: socket.socket, peer: str) -> None:
        super().__init__(sock)
        self._tls = isinstance(sock, ssl.SSLSocket)
        self.peer = peer
        self._call_ended = threading.Event()

    def call_ended(self) -> None:
        """The call ended (its termination callback): a send blocked on the channel ends,
        and a broken channel is the call's end, not an error. Any thread."""
        self._call_ended.set()
        self.abort()

    def send(self, pieces: list[memoryview]) -> bool:
        """Write ``pieces`` in order, with no copy of them. False when the call ended (the
        caller cancelled or went away: its send loop stops); ``Unavailable`` when the
        channel broke under a call that goes on (``CALL_END_WAIT_S``)."""
        try:
            if self._tls:
                for piece in pieces:
                    self._sock.sendall(piece)
            else:
                self._send_plain(list(pieces))
        except OSError as exc:
            if self._call_ended.wait(CALL_END_WAIT_S):
                return False
            raise Unavailable(f"the data channel to {self.peer} broke: {exc}") from None
        return True

    def _send_plain(self, views: list[memoryview]) -> None:
        first = 0
        while first < len(views):
            sent = self._sock.sendmsg(views[first:first + MAX_IOV])
            while sent:
                size = len(views[first])
                if sent >= size:
                    sent -= size
                    first += 1
                else:
                    views[first] = views[first][sent:]
                    sent = 0


def send_on(sink: DataSink, index: int, batch: Sequence[TensorList], *,
            opens_source_epoch: bool = False) -> Generator[bytes, None, int | None]:
    """A batch on a data channel: its header frame (yielded), then its bytes on ``sink``
    once gRPC took the frame, in the order the client reads them. Returns the bytes, or
    None when the call ended first (the batch was not delivered)."""
    header, pieces = batch_header(index, batch, opens_source_epoch=opens_source_epoch)
    frame = header_frame(header)
    yield frame
    if not sink.send(pieces):
        return None
    return len(frame) + header.total_bytes


def send_batch(sink: DataSink | None, index: int, batch: Sequence[TensorList],
               frame_bytes: int, *, opens_source_epoch: bool
               ) -> Generator[bytes, None, int | None]:
    """A batch as its call sends it: on a data channel (``sink``), ``send_on``; else its
    frames of at most ``frame_bytes``. Returns the bytes sent, or None when the call ended
    under them."""
    if sink is not None:
        return (yield from send_on(sink, index, batch, opens_source_epoch=opens_source_epoch))
    size = 0
    for frame in encode_frames(index, batch, frame_bytes, opens_source_epoch=opens_source_epoch):
        size += len(frame)
        yield frame
    return size


class Pending:
    """A ticket offered to one call, until its channel attaches, it expires or the call
    ends."""

    def __init__(self, key: bytes, expires: float) -> None:
        self.key = key
        self.expires = expires
        self.attached = threading.Event()
        self.sink: DataSink | None = None
        self.void = False


class DataPort:
    def __init__(self, settings: DataPortSettings,
                 certificates: CertificateFiles | None = None) -> None:
        self.settings = settings
        self._certificates = certificates
        self._context: ssl.SSLContext | None = None
        self._context_signature: object = None
        self._refused_signature: object = None
        self._ssl()  # files that cannot be used stop the server here, not a handshake later
        family = socket.AF_INET6 if ":" in settings.host else socket.AF_INET
        try:
            self._listener = socket.create_server((settings.host, settings.port),
                                                  family=family, backlog=128)
        except OSError as exc:
            raise OSError(f"cannot listen on {settings.host}:{settings.port} for the data "
                          f"channel (data_channel.port): {exc.strerror or exc}") from None
        self._listener.settimeout(TICK_S)
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._pending: dict[bytes, Pending] = {}
        #: The connections still in their handshake: their deadline and socket.
        self._handshakes: dict[int, tuple[float, socket.socket]] = {}
        self._ids = iter(range(1 << 62))
        self._stopped = threading.Event()
        #: Connections refused, by reason ("ticket", "hello", "tls", "busy").
        self.refusals: Counter[str] = Counter()
        #: Channels attached.
        self.attached = 0
        #: Told of each attached channel and each refusal (the server's metrics).
        self.on_attached: Callable[[], object] = lambda: None
        self.on_refused: Callable[[str], object] = lambda reason: None
        self._thread = threading.Thread(target=self._accept, name="conveyor-data-port",
                                        daemon=True)
        self._thread.start()

    # -- the calls' side -------------------------------------------------------------------

    def offer(self, context: grpc.ServicerContext, response: Callable[..., object]
              ) -> Generator[bytes, None, DataSink | None]:
        """A generator for a call's send loop: yields the offer frame (an encoded
        ``response`` message holding it) and returns the attached sink once the client
        presented the ticket; returns None, yielding nothing, when no ticket is free (the
        call's data then goes in frames). ``Unavailable`` when the ticket expires unused;
        None too when the call ended meanwhile."""
        now = time.monotonic()
        ticket = secrets.token_bytes(TICKET_BYTES)
        pending = Pending(hashlib.sha256(ticket).digest(), now + self.settings.handshake_s)
        with self._lock:
            for key in [k for k, p in self._pending.items() if p.expires < now]:
                del self._pending[key]
            if len(self._pending) >= self.settings.max_pending:
                log.warning("data channel: %d tickets wait already (data_channel.max_pending):"
                            " a call from %s gets its data in gRPC frames", len(self._pending),
                            context.peer(), extra={"peer": context.peer()})
                return None
            self._pending[pending.key] = pending
        try:
            offer = service_pb2.DataChannelOffer(
                ticket=ticket, port=self.port,
                expires_ms=int(self.settings.handshake_s * 1000))
            message = response(offer=offer)
            yield message.SerializeToString()  # type: ignore[attr-defined]
            while not pending.attached.wait(TICK_S):
                if not context.is_active():
                    return None
                if time.monotonic() > pending.expires:
                    raise Unavailable(
                        f"the data channel offered to {context.peer()} was not attached "
                        f"within {self.settings.handshake_s:.0f} s: call again without "
                        "data_channel")
            sink, pending.sink = pending.sink, None
            if sink is not None:
                context.add_callback(sink.call_ended)  # a send blocked on it ends
            return sink  # the call's now: it closes it
        finally:
            with self._lock:
                self._pending.pop(pending.key, None)
                pending.void = True
                left = pending.sink
            if left is not None:  # attached as the call ended
                left.close()

    # -- the connections' side -------------------------------------------------------------

    def _ssl(self) -> ssl.SSLContext | None:
        """The server's TLS context, made again when the certificate files changed."""
        files = self._certificates
        if files is None:
            return None
        signature = files.signature()
        if self._context is not None and signature in (self._context_signature,
                                                       self._refused_signature):
            return self._context
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            context.load_cert_chain(files.files["tls.cert_file"],
                                    files.files["tls.key_file"])
            ca: Path | None = files.files.get("tls.client_ca_file")
            if ca is not None:
                context.load_verify_locations(cafile=ca)
                context.verify_mode = ssl.CERT_REQUIRED
        except (ssl.SSLError, OSError) as exc:
            if self._context is None:
                raise
            self._refused_signature = signature  # until a file changes again
            log.error("data channel: cannot read the TLS files again (%s); serving the "
                      "certificate read before", exc)
            return self._context
        self._context, self._context_signature = context, signature
        return self._context

    def _accept(self) -> None:
        while not self._stopped.is_set():
            self._reap()
            try:
                conn, address = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                if self._stopped.is_set():
                    return
                continue
            peer = f"{address[0]}:{address[1]}"
            key = next(self._ids)
            with self._lock:
                busy = len(self._handshakes) >= self.settings.max_handshakes
                if not busy:
                    self._handshakes[key] = (time.monotonic() + self.settings.handshake_s,
                                             conn)
            if busy:
                self._refuse(conn, peer, "busy", f"{self.settings.max_handshakes} "
                             "handshakes are under way (data_channel.max_handshakes)")
                continue
            threading.Thread(target=self._handshake, args=(key, conn, peer),
                             name="conveyor-data-handshake", daemon=True).start()

    def _reap(self) -> None:
        """Cut the handshakes past their time (their threads then fail and close them)."""
        now = time.monotonic()
        with self._lock:
            late = [conn for deadline, conn in self._handshakes.values() if deadline < now]
        for conn in late:
            with contextlib.suppress(OSError):
                socket.socket.shutdown(conn, socket.SHUT_RDWR)

    def _refuse(self, conn: socket.socket, peer: str, reason: str, why: str) -> None:
        with self._lock:
            self.refusals[reason] += 1
        self.on_refused(reason)
        log.warning("data channel: refused a connection from %s: %s", peer, why,
                    extra={"peer": peer})
        with contextlib.suppress(OSError):
            conn.close()

    def _handshake(self, key: int, raw: socket.socket, peer: str) -> None:
        conn: socket.socket = raw
        try:
            raw.settimeout(self.settings.handshake_s)
            context = self._ssl()
            if context is not None:
                conn = context.wrap_socket(raw, server_side=True,
                                           do_handshake_on_connect=False)
                with self._lock:  # (the raw socket was detached: the reaper cuts this)
                    self._handshakes[key] = (self._handshakes[key][0], conn)
                try:
                    conn.do_handshake()
                except (OSError, ValueError) as exc:
                    self._refuse(conn, peer, "tls", f"TLS handshake failed: {exc}")
                    return
            hello = b""
            while len(hello) < len(HELLO) + TICKET_BYTES:
                got = conn.recv(len(HELLO) + TICKET_BYTES - len(hello))
                if not got:
                    break
                hello += got
            if len(hello) < len(HELLO) + TICKET_BYTES:  # closed, or cut by the reaper
                self._refuse(conn, peer, "hello", f"the handshake did not complete ({len(hello)}"
                             f" of the hello's {len(HELLO) + TICKET_BYTES} bytes)")
                return
            if not hello.startswith(HELLO):
                self._refuse(conn, peer, "hello", f"not a data channel hello of version "
                             f"{HELLO[-1]}")
                return
            pending = self._redeem(hello[len(HELLO):])
            if pending is None:
                self._refuse(conn, peer, "ticket", "a wrong, expired or used ticket")
                return
            conn.sendall(READY)
            conn.settimeout(None)
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
            sink = DataSink(conn, peer)
            with self._lock:
                self._handshakes.pop(key, None)  # done: past the reaper's reach
                if pending.void:  # the call ended meanwhile
                    sink.close()
                    return
                pending.sink = sink
                self.attached += 1
                pending.attached.set()
            self.on_attached()
        except OSError as exc:  # a timeout, a reset, a cut by _reap
            self._refuse(conn, peer, "hello", f"the handshake did not complete: {exc}")
        finally:
            with self._lock:
                self._handshakes.pop(key, None)

    def _redeem(self, ticket: bytes) -> Pending | None:
        """The call ``ticket`` was offered to, taken (single use); None if none is."""
        key = hashlib.sha256(ticket).digest()
        with self._lock:
            pending = self._pending.pop(key, None)
        if pending is None or pending.void or time.monotonic() > pending.expires:
            return None
        return pending

    def close(self) -> None:
        self._stopped.set()
        with contextlib.suppress(OSError):
            self._listener.close()
        self._thread.join(1.0)
