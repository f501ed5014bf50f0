"""The data channel against real servers on loopback: a stream's batch bytes on the data
port are the bytes of gRPC frames, for several pipelines; TLS and mTLS on the data port;
wrong, reused and expired tickets refused; the fallback to gRPC frames when the data port
cannot be reached; a kill -9 of the holder mid-stream loses or repeats nothing."""

from __future__ import annotations

import logging
import os
import queue
import secrets
import shutil
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml

import conveyor
from conveyor import fn, pipeline_def, types
from conveyor.transport.channel import AUTHORIZATION_KEY, STREAM_BATCHES_PATH, bearer
from conveyor.transport.credentials import TlsOptions, open_channel
from conveyor.transport.data_channel import Dialer, Unreachable
from conveyor.transport.wire import parse_frame, parse_offer
from conveyor.v1 import service_pb2
from conveyor_server.demo.run import rotate_pipeline
from tests.app.test_metrics import scrape
from tests.fleet.holding_proxy import HoldingProxy
from tests.service.test_tls import Pki, pki, tls_args  # noqa: F401  (pki: a fixture)
from tests.support.certs import peer_serial
from tests.support.resume import batch_bytes, reference
from tests.support.servers import DEADLINE, ServerProcess, Start, client, wait_for

BATCHES = 7


@pipeline_def(batch_size=3, num_threads=2, seed=5, enable_checkpointing=True)
def images_u8(root: str) -> Any:
    jpegs, labels = fn.readers.file(file_root=root, random_shuffle=True)
    images = fn.decoders.image(jpegs, output_type=types.RGB)
    return fn.resize(images, resize_x=40, resize_y=32), labels


@pipeline_def(batch_size=3, num_threads=2, seed=6, enable_checkpointing=True)
def ragged_f16(root: str) -> Any:
    """Decoded images of their own sizes, rotated (other sizes again), as float16, and an
    output of no bytes at all."""
    jpegs, _ = fn.readers.file(file_root=root, random_shuffle=True)
    images = fn.decoders.image(jpegs, output_type=types.RGB)
    rotated = fn.rotate(images, angle=fn.random.uniform(range=(-30.0, 30.0)), fill_value=0)
    nothing = fn.random.uniform(range=(0.0, 1.0), shape=(0,))
    return fn.cast(rotated, dtype=types.FLOAT16), nothing, rotated


@pipeline_def(batch_size=4, num_threads=1, seed=7, enable_checkpointing=True)
def empty() -> Any:
    """Batches of zero bytes: headers alone."""
    return fn.random.uniform(range=(0.0, 1.0), shape=(0,))


def read(c: conveyor.Client, name: str, spec: Any, count: int = BATCHES) -> tuple[
        list[Any], bool]:
    """``count`` batches of a new pipeline ``name`` as bytes, and whether they came on a
    data channel."""
    pipe = c.create(name, spec)
    got = [batch_bytes(pipe.run()) for _ in range(count)]
    on_channel = pipe.data_channel
    pipe.close()
    return got, on_channel


@pytest.mark.parametrize("which", ["uint8 images", "ragged float16 and zero bytes",
                                   "empty batches"])
def test_the_data_channel_carries_the_bytes_of_the_frames(start_server: Start,
                                                          image_root: Path,
                                                          which: str) -> None:
    root = str(image_root / "imgs")
    spec = {"uint8 images": lambda: images_u8(root), "ragged float16 and zero bytes":
            lambda: ragged_f16(root), "empty batches": empty}[which]()
    server = start_server()
    with client(server) as on, client(server, data_channel=False) as off:
        channel, used = read(on, "on", spec)
        frames, unused = read(off, "off", spec)
    assert used and not unused
    assert channel == frames
    assert channel == reference(spec, BATCHES)
    if which == "empty batches":
        assert all(len(out[0][2]) == 0 for batch in channel for out in batch)


def test_a_server_without_a_data_port_sends_frames(start_server: Start,
                                                   image_root: Path) -> None:
    server = start_server("--no-data-channel")
    spec = images_u8(str(image_root / "imgs"))
    with client(server) as c:
        got, used = read(c, "frames", spec)
        assert not used
        assert not c.connection(server.address).data_channel_off  # asked, not refused
    assert got == reference(spec, BATCHES)


class Call:
    """A raw StreamBatches call asking for a data channel, its requests held open."""

    def __init__(self, address: str, name: str, tls: TlsOptions | None = None,
                 token: str | None = None) -> None:
        self.channel = open_channel(address, tls)
        self._requests: queue.SimpleQueue[service_pb2.StreamBatchesRequest | None] = \
            queue.SimpleQueue()
        self._requests.put(service_pb2.StreamBatchesRequest(name=name, data_channel=True))
        method = self.channel.stream_stream(
            STREAM_BATCHES_PATH,
            request_serializer=service_pb2.StreamBatchesRequest.SerializeToString,
            response_deserializer=None)
        self.frames = method(self._iterate(), timeout=DEADLINE,
                             metadata=((AUTHORIZATION_KEY, bearer(token)),) if token else ())

    def _iterate(self) -> Iterator[service_pb2.StreamBatchesRequest]:
        while (request := self._requests.get()) is not None:
            yield request

    def offer(self) -> service_pb2.DataChannelOffer:
        offer = parse_offer(next(self.frames))
        assert offer is not None, "the first frame is not an offer"
        assert len(offer.ticket) == 32 and offer.port and offer.expires_ms
        return offer

    def close(self) -> None:
        self.frames.cancel()
        self._requests.put(None)
        self.channel.close()


def dialer(server: ServerProcess, tls: TlsOptions | None = None) -> Dialer:
    return Dialer(server.address, tls, [server.address], idle_s=DEADLINE)


def test_wrong_reused_and_expired_tickets_are_refused(start_server: Start,
                                                      image_root: Path) -> None:
    server = start_server(env={"CONVEYOR_DATA_CHANNEL_HANDSHAKE_S": "1"}, metrics=True)
    spec = images_u8(str(image_root / "imgs"))
    with client(server) as c:
        c.create("tickets", spec)
    call = Call(server.address, "tickets")
    try:
        offer = call.offer()
        wrong = service_pb2.DataChannelOffer(ticket=secrets.token_bytes(32), port=offer.port,
                                             expires_ms=offer.expires_ms)
        with pytest.raises(Unreachable, match="refused the ticket"):
            dialer(server).attach(wrong)
        attached = dialer(server).attach(offer)  # the right one, once
        with pytest.raises(Unreachable, match="refused the ticket"):
            dialer(server).attach(offer)  # used
        attached.close()
    finally:
        call.close()
    late = Call(server.address, "tickets")
    try:
        offer = late.offer()
        time.sleep(1.5)  # past the ticket's second: what this test is about
        with pytest.raises(Unreachable, match="refused the ticket"):
            dialer(server).attach(offer)
        with pytest.raises(grpc.RpcError) as ended:  # and the call ends, saying why
            next(late.frames)
        assert ended.value.code() == grpc.StatusCode.UNAVAILABLE
        assert "was not attached within" in (ended.value.details() or "")
    finally:
        late.close()
    with socket.create_connection(("127.0.0.1", offer.port), timeout=10) as stranger:
        stranger.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" + bytes(9))  # 36 bytes
        assert stranger.recv(8) == b""  # no answer: closed
    wait_for(lambda: server.log_path.read_text().count(
        "a wrong, expired or used ticket") == 3, "three refused tickets in the log")
    wait_for(lambda: "not a data channel hello" in server.log_path.read_text(),
             "the stranger in the log")
    samples, _ = scrape(server)
    assert samples[("conveyor_data_channel_refusals_total",
                    frozenset({("reason", "hello")}))] == 1
    assert samples[("conveyor_data_channel_refusals_total",
                    frozenset({("reason", "ticket")}))] == 3
    assert samples[("conveyor_data_channels_total", frozenset())] == 1


def test_tls_and_mtls_data_ports(start_server: Start, image_root: Path,
                                 pki: Pki) -> None:  # noqa: F811
    spec = images_u8(str(image_root / "imgs"))
    expected = reference(spec, BATCHES)
    tls_server = start_server(*tls_args(pki), tls=pki.plain)
    with client(tls_server, tls=pki.plain) as c:
        got, used = read(c, "over-tls", spec)
    assert used and got == expected
    mutual = pki.client("trainer", "spiffe://conveyor/trainer")
    mtls_server = start_server(*tls_args(pki, mutual=True), tls=mutual)
    with client(mtls_server, tls=mutual) as c:
        got, used = read(c, "over-mtls", spec)
    assert used and got == expected
    # A client without a certificate is refused by the mTLS data port, even with a
    # ticket; the same ticket then attaches with the certificate.
    call = Call(mtls_server.address, "over-mtls", tls=mutual)
    try:
        offer = call.offer()
        with pytest.raises(Unreachable):
            dialer(mtls_server, pki.plain).attach(offer)
        dialer(mtls_server, mutual).attach(offer).close()
    finally:
        call.close()
    wait_for(lambda: "TLS handshake failed" in mtls_server.log_path.read_text(),
             "the refused TLS handshake in the log")
    # A plaintext connection to a TLS data port gets nothing either.
    call = Call(tls_server.address, "over-tls", tls=pki.plain)
    try:
        with pytest.raises(Unreachable):
            dialer(tls_server).attach(call.offer())
    finally:
        call.close()


def test_an_unreachable_data_port_falls_back_to_frames(
        start_server: Start, image_root: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A proxy on 127.0.0.2 that passes the gRPC port alone: the offered data port is not
    reachable there (the server's listens on 127.0.0.1)."""
    server = start_server()
    proxy = HoldingProxy(host="127.0.0.2").forward_to(server.address)
    spec = images_u8(str(image_root / "imgs"))
    caplog.set_level(logging.WARNING, "conveyor.client")
    try:
        with conveyor.Client(proxy.address, timeout=DEADLINE, place=False) as c:
            first, used = read(c, "behind-a-proxy", spec)
            again, used_again = read(c, "behind-a-proxy-2", spec)
            assert c.connection(proxy.address).data_channel_off
    finally:
        proxy.close()
    assert not used and not used_again
    assert first == again == reference(spec, BATCHES)
    said = [r for r in caplog.records if "cannot attach the data channel" in r.getMessage()]
    assert len(said) == 1, "the fallback is said once per server"


def test_a_kill_of_the_holder_mid_stream_loses_nothing(start_server: Start,
                                                       image_root: Path) -> None:
    a, b = start_server(), start_server()
    spec = rotate_pipeline(str(image_root / "imgs"), batch_size=2)
    expected = reference(spec, 40)
    with conveyor.Client([a.address, b.address], timeout=DEADLINE, place=False,
                         keepalive_s=1, keepalive_timeout_s=1) as c:
        pipe = c.create("killed", spec)
        got = [batch_bytes(pipe.run()) for _ in range(5)]
        pipe.checkpoint()
        got += [batch_bytes(pipe.run()) for _ in range(3)]
        assert pipe.data_channel
        a.kill()
        while len(got) < 40:
            got.append(batch_bytes(pipe.run()))
        assert pipe.via == b.address and pipe.failovers == 1
        assert pipe.data_channel  # on the new holder too
    assert got == expected, "a batch was lost or repeated"


def test_the_offer_comes_only_after_authentication_and_authorisation(
        start_server: Start, image_root: Path, tmp_path: Path) -> None:
    tokens = {"alice": "alice-token-0123456789", "bob": "bob-token-0123456789"}
    (tmp_path / "tokens.yaml").write_text(yaml.safe_dump(tokens))
    server = start_server("--tokens-file", str(tmp_path / "tokens.yaml"))
    with client(server, token=tokens["alice"]) as c:
        _, used = read(c, "alices", images_u8(str(image_root / "imgs")), 2)
    assert used
    for token, code in ((None, grpc.StatusCode.UNAUTHENTICATED),
                        ("not-a-token-of-this-server", grpc.StatusCode.UNAUTHENTICATED),
                        (tokens["bob"], grpc.StatusCode.PERMISSION_DENIED)):
        call = Call(server.address, "alices", token=token)
        try:
            with pytest.raises(grpc.RpcError) as refused:
                call.offer()
            assert refused.value.code() == code
        finally:
            call.close()
    call = Call(server.address, "alices", token=tokens["alice"])
    try:
        call.offer()
    finally:
        call.close()


def test_pending_tickets_and_handshakes_are_bounded(start_server: Start,
                                                    image_root: Path) -> None:
    server = start_server(env={"CONVEYOR_DATA_CHANNEL_MAX_PENDING": "1",
                               "CONVEYOR_DATA_CHANNEL_MAX_HANDSHAKES": "1",
                               "CONVEYOR_DATA_CHANNEL_HANDSHAKE_S": "1"})
    spec = images_u8(str(image_root / "imgs"))
    with client(server) as c:
        c.create("first", spec)
        c.create("second", spec)
    waiting = Call(server.address, "first")
    offer = waiting.offer()
    other = Call(server.address, "second")
    try:
        # One ticket waits: the second call gets no offer, its batches come in frames.
        header, data = parse_frame(next(other.frames))
        assert header is not None and header.index == 0 and len(data)
        # One connection in its handshake: the next is closed at once; the first is cut
        # when its second is over.
        silent = socket.create_connection(("127.0.0.1", offer.port), timeout=10)
        time.sleep(0.2)  # (the listener takes the silent one first)
        turned_away = socket.create_connection(("127.0.0.1", offer.port), timeout=10)
        assert turned_away.recv(1) == b""
        started = time.monotonic()
        with pytest.raises(OSError):
            if silent.recv(1) == b"":
                raise OSError("closed")
        assert 0.3 < time.monotonic() - started < 5
        silent.close()
        turned_away.close()
    finally:
        waiting.close()
        other.close()
    wait_for(lambda: "handshakes are under way" in server.log_path.read_text()
             and "did not complete" in server.log_path.read_text(),
             "the turned-away and the cut connections in the log")


def test_the_data_port_serves_rotated_certificate_files(start_server: Start, image_root: Path,
                                                        pki: Pki) -> None:  # noqa: F811
    """As the gRPC port (test_tls): the files swapped as a Secret volume does it, the data
    port's next connection gets the new certificate; a half-written pair is not served."""
    live = pki.live_files()
    server = start_server("--tls-cert", str(live / "tls.crt"), "--tls-key",
                          str(live / "tls.key"), tls=pki.plain)
    spec = images_u8(str(image_root / "imgs"))
    with client(server, tls=pki.plain) as c:
        c.create("rotating", spec)
    call = Call(server.address, "rotating", tls=pki.plain)
    try:
        port = call.offer().port
    finally:
        call.close()
    assert peer_serial("127.0.0.1", port, pki.ca_file) == \
        peer_serial("127.0.0.1", server.port, pki.ca_file)

    renewed = pki.ca.issue("127.0.0.1", "localhost")
    second = pki.folder / "v2"
    second.mkdir()
    renewed.write(second / "tls.crt", second / "tls.key")
    pki.swap_live(second)
    wait_for(lambda: peer_serial("127.0.0.1", port, pki.ca_file) == renewed.serial,
             "the data port's renewed certificate")
    with client(server, tls=pki.plain) as c:
        got, used = read(c, "after-rotation", spec, 2)
    assert used and got == reference(spec, 2)
    third = pki.folder / "v3"  # the new key, an old certificate: a rotation caught half-way
    third.mkdir()
    shutil.copy(second / "tls.key", third / "tls.key")
    (third / "tls.crt").write_bytes(pki.ca.issue("127.0.0.1").cert_pem)
    pki.swap_live(third)
    assert peer_serial("127.0.0.1", port, pki.ca_file) == renewed.serial
    wait_for(lambda: "data channel: cannot read the TLS files again"
             in server.log_path.read_text(), "the refused pair in the log")


def sockets_on(pid: int | str, port: int, *, remote: bool) -> int:
    """Established TCP sockets of process ``pid`` whose remote (else local) port is
    ``port`` (from /proc)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    count = 0
    for line in Path(f"/proc/{pid}/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, peer, state, inode = fields[1], fields[2], fields[3], fields[9]
        end = peer if remote else local
        if state == "01" and inode in inodes and int(end.split(":")[1], 16) == port:
            count += 1
    return count


def test_closed_streams_leave_no_socket_on_either_side(start_server: Start,
                                                       image_root: Path) -> None:
    server = start_server()
    assert server.proc is not None
    pid = server.proc.pid
    spec = images_u8(str(image_root / "imgs"))
    with client(server) as c:
        c.create("probe", spec)
    call = Call(server.address, "probe")
    try:
        port = call.offer().port
    finally:
        call.close()
    with client(server) as c:
        for i in range(3):
            pipe = c.create(f"closed-{i}", spec)
            pipe.run()
            assert pipe.data_channel
            assert sockets_on("self", port, remote=True) == 1
            pipe.close()
            assert sockets_on("self", port, remote=True) == 0
        left_open = c.create("left-open", spec)  # closed by the client's close
        left_open.run()
        assert sockets_on("self", port, remote=True) == 1
    assert sockets_on("self", port, remote=True) == 0
    wait_for(lambda: sockets_on(pid, port, remote=False) == 0,
             "the server to close every data channel")
