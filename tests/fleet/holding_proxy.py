"""A TCP forwarder in front of a server whose answers can be held back: the network of a
server that computes but whose bytes reach the trainer late (a congested link), with real
sockets. The client's requests always pass; the server's bytes pass while ``answers`` is
set and wait in the socket buffers while it is cleared."""

from __future__ import annotations

import socket
import threading
from contextlib import suppress


class HoldingProxy:
    def __init__(self, host: str = "127.0.0.1") -> None:
        """``host``: where it listens (another loopback address than the server's: a proxy
        whose host reaches the server's gRPC port alone)."""
        self.host = host
        self._listener = socket.create_server((host, 0))
        self.port = int(self._listener.getsockname()[1])
        #: Set: the server's bytes go through; cleared: they wait.
        self.answers = threading.Event()
        self.answers.set()
        self._target: tuple[str, int] | None = None
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def forward_to(self, address: str) -> HoldingProxy:
        host, port = address.rsplit(":", 1)
        self._target = (host, int(port))
        threading.Thread(target=self._accept, daemon=True, name="holding-proxy").start()
        return self

    def _accept(self) -> None:
        assert self._target is not None
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            server = socket.create_connection(self._target)
            with self._lock:
                self._sockets += [client, server]
            for source, sink, held in ((client, server, False), (server, client, True)):
                threading.Thread(target=self._pipe, args=(source, sink, held),
                                 daemon=True, name="holding-proxy-pipe").start()

    def _pipe(self, source: socket.socket, sink: socket.socket, held: bool) -> None:
        with suppress(OSError):
            while data := source.recv(1 << 16):
                if held:
                    self.answers.wait()
                sink.sendall(data)
        for end in (source, sink):
            with suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self.answers.set()
        self._listener.close()
        with self._lock:
            for end in self._sockets:
                end.close()
