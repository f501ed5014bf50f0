"""A TCP proxy on loopback in front of a real server, for fault tests: it answers the
first ``refuse`` connections with ``503 SlowDown`` (as S3 does when it sheds load) and
closes them, and holds every chunk a client sends for ``delay`` seconds (slow answers),
and between ``hold()`` and ``release()`` until released (requests made and not answered,
for as long as a test needs). New connections go to ``target``: setting it
moves the endpoint (a managed Redis's primary endpoint, moved to the promoted replica);
one whose target does not answer is closed."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

from tests.support.seaweed import free_ports

SLOW_DOWN = (b"HTTP/1.1 503 Slow Down\r\nContent-Type: application/xml\r\nConnection: close\r\n"
             b"Content-Length: 113\r\n\r\n<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>"
             b"SlowDown</Code><Message>Please reduce your request rate.</Message></Error>")


class FaultProxy:
    def __init__(self, target: int, *, refuse: int = 0, delay: float = 0.0,
                 port: int = 0) -> None:
        """``port``: the one to listen on (0: a free one)."""
        self.port = port or free_ports(1)[0]
        self.refuse = refuse
        self.refused = 0
        #: The port new connections are forwarded to.
        self.target = target
        self._delay = delay
        self._loop = asyncio.new_event_loop()
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        self._started.wait()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._open = asyncio.Event()
        self._open.set()
        self._server = self._loop.run_until_complete(
            asyncio.start_server(self._serve, "127.0.0.1", self.port))
        self._started.set()
        self._loop.run_forever()
        self._loop.close()

    def hold(self) -> None:
        """Hold what clients send from now on (on open connections too), until
        ``release()``."""
        self._on_loop(self._open.clear)

    def release(self) -> None:
        """Let what was held, and what comes, through."""
        self._on_loop(self._open.set)

    def _on_loop(self, call: Callable[[], None]) -> None:
        async def run() -> None:
            call()
        asyncio.run_coroutine_threadsafe(run(), self._loop).result(5)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.refused < self.refuse:
            self.refused += 1
            await reader.read(1 << 16)  # the request
            writer.write(SLOW_DOWN)
            await writer.drain()
            writer.close()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target)
        except OSError:  # nothing listens there (a killed server): as it would, refuse
            writer.close()
            return

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter,
                       delay: float, gated: bool) -> None:
            try:
                while chunk := await src.read(1 << 16):
                    if gated:
                        await self._open.wait()
                    if delay:
                        await asyncio.sleep(delay)
                    dst.write(chunk)
                    await dst.drain()
            except ConnectionError:
                pass
            finally:
                dst.close()
        await asyncio.gather(pipe(reader, up_writer, self._delay, True),
                             pipe(up_reader, writer, 0.0, False))

    def close(self) -> None:
        async def stop() -> None:
            self._server.close()
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()
        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
