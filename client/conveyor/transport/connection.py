"""One gRPC channel to one Conveyor server, and the errors that come back on it.

A ``Connection`` makes unary calls and opens batch streams with the project's channel
options and keepalive, over TLS when the client has ``TlsOptions`` (``credentials.py``);
a failed call is raised as the ``conveyor.errors`` class the server
named in its ``ErrorInfo`` (else the one of its status code), with its metadata.
``server_targets`` checks what a caller gave as its servers (``Client`` and every adapter
call it); ``addresses`` turns those targets into server addresses: a DNS name that resolves
to several (a headless Service) gives each of them.

**Closing never hangs.** ``grpc.Channel.close()`` cancels the channel's calls, then waits
until gRPC's own threads (the channel's "spin" thread, which handles the calls' completion
events) have let go of each of them. That wait is forever when those threads cannot run:
at interpreter exit (a generator holding a client, finalised by the last garbage
collection after Python stopped every daemon thread, gRPC's included) or when the close
runs on the spin thread itself (a finaliser the garbage collector happens to run there, a
done-callback). So ``close_connections`` closes channels on a thread of its own and waits
for them at most ``CLOSE_WAIT_S`` (on one of gRPC's threads: not at all; the close ends
once that thread is free again), and at interpreter exit does not close them at all: the
process's end frees their sockets. (``Client`` closes its own from an ``atexit`` hook,
before Python stops gRPC's threads: see ``client.py``.) ``wait_for_the_end`` ends a
stream's call the same way: bounded, and never reading on gRPC's own threads.
``say_where_it_failed`` rewords a failed call's error with the server and why nothing
failed over.
"""

from __future__ import annotations

import itertools
import logging
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import grpc
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from conveyor import errors
from conveyor.transport.channel import (
    CHANNEL_OPTIONS,
    CHECKPOINT_BATCHES_KEY,
    CHECKPOINT_ID_KEY,
    COMPUTE_BATCHES_PATH,
    SERVER_NAME_KEY,
    STREAM_BATCHES_PATH,
    client_keepalive,
    host_port,
)
from conveyor.transport.credentials import TlsOptions, open_channel
from conveyor.transport.data_channel import Attempt, DataSocket, Dialer, Unreachable
from conveyor.transport.wire import parse_offer
from conveyor.v1 import service_pb2, service_pb2_grpc

Metadata = tuple[tuple[str, str], ...]
log = logging.getLogger("conveyor.client")
#: The longest ``close_connections`` waits for gRPC to close the channels (it takes
#: milliseconds whenever gRPC's threads can run, whatever state the servers are in).
CLOSE_WAIT_S = 5.0


class Connection:
    def __init__(self, address: str, metadata: Metadata, keepalive: tuple[float, float],
                 tls: TlsOptions | None = None, targets: Sequence[str] = (),
                 data_channel: bool = True,
                 on_name: Callable[[str, str], None] | None = None) -> None:
        """``targets``: the client's targets, whose first names the certificate of a
        server reached by IP (see ``credentials.expected_name``). ``data_channel``: ask
        for batch bytes on a data channel (``data_channel.py``) on batch calls.
        ``on_name(address, advertised)``: told the server's advertised name when a call
        first says it (or says another)."""
        self.address = address
        #: The address the server advertises (its name in the fleet's records and as a
        #: pipeline's holder), as its calls say it; "" until one answered.
        self.advertised = ""
        self._on_name = on_name
        self._metadata = metadata
        self._dialer = Dialer(address, tls, targets, idle_s=sum(keepalive))
        #: Why the data channel is off for this server ("" while it is on).
        self.data_channel_off = ("" if data_channel else
                                 "turned off (Client(data_channel=False))")
        if address.startswith("unix"):  # a local socket: no TCP port to reach
            self.data_channel_off = "not over TCP"
        self._channel = open_channel(address, tls, (*CHANNEL_OPTIONS,
                                                    *client_keepalive(*keepalive)), targets)
        self._stub = service_pb2_grpc.ConveyorStub(self._channel)
        # Batch frames stay encoded: BatchAssembler copies their data straight into place.
        self._stream_frames = self._channel.stream_stream(
            STREAM_BATCHES_PATH,
            request_serializer=service_pb2.StreamBatchesRequest.SerializeToString,
            response_deserializer=None)
        self._compute_frames = self._channel.stream_stream(
            COMPUTE_BATCHES_PATH,
            request_serializer=service_pb2.ComputeBatchesRequest.SerializeToString,
            response_deserializer=None)

    def call(self, method: str, request: Any, timeout: float) -> Any:
        try:
            reply, call = getattr(self._stub, method).with_call(
                request, timeout=timeout, metadata=self._metadata)
        except grpc.RpcError as exc:
            self.heard(exc)
            raise error_of(exc) from None
        self.heard(call)
        return reply

    def ask_name(self, timeout: float) -> Any:
        """A call (a future) whose answer says the server's advertised name: pass it to
        ``heard`` once it is done."""
        return self._stub.ListServers.future(service_pb2.ListServersRequest(),
                                             timeout=timeout, metadata=self._metadata)

    def heard(self, call: Any) -> None:
        """Take the server's advertised name from a call's initial metadata (a call that
        never reached a server has none)."""
        for key, value in call.initial_metadata() or ():
            if key == SERVER_NAME_KEY and isinstance(value, str) and value != self.advertised:
                self.advertised = value
                if self._on_name is not None:
                    self._on_name(self.address, value)

    def stream(self, requests: Iterator[service_pb2.StreamBatchesRequest],
               timeout: float | None) -> Any:
        """The frames of a StreamBatches call (an iterator that can be cancelled)."""
        return self._stream_frames(requests, timeout=timeout, metadata=self._metadata)

    def compute(self, requests: Iterator[service_pb2.ComputeBatchesRequest]) -> Any:
        """The frames of a ComputeBatches call (fan-in; an iterator that can be
        cancelled)."""
        return self._compute_frames(requests, metadata=self._metadata)

    @property
    def wants_data_channel(self) -> bool:
        return not self.data_channel_off

    def attach(self, call: Any, attempt: Attempt | None = None
               ) -> tuple[Iterator[bytes], DataSocket | None] | None:
        """For a batch call that asked for a data channel: its frames (the first one read
        ahead) and its channel, attached as the call's offer says (None: the server made
        no offer, and the frames carry the bytes). None when the offered channel cannot be
        attached: the channel is then off for this server, said once in the log, and the
        call must be made again without it. ``attempt``: lets the caller's close abort an
        attach under way (``Unavailable``)."""
        first = next(call, None)
        if first is not None:
            self.heard(call)
        offer = parse_offer(first) if first is not None else None
        if offer is None:  # ended, or a server without a data port
            return itertools.chain([first] if first is not None else [], call), None
        try:
            return call, self._dialer.attach(offer, attempt)
        except Unreachable as exc:
            if not self.data_channel_off:
                self.data_channel_off = str(exc)
                log.warning("conveyor: %s; batches from %s come in gRPC frames from now on",
                            exc, self.address)
            return None

    def close(self) -> None:
        """Close the channel, its calls (cancelled) and its sockets; at most
        ``CLOSE_WAIT_S``, never forever (see the module's doc)."""
        close_connections([self])


def close_connections(connections: Iterable[Connection],
                      wait: float = CLOSE_WAIT_S) -> None:
    """Close the connections' channels together, each on a thread of its own, waiting for
    them at most ``wait`` seconds in all (a close still blocked then goes on in the
    background, and is logged). At interpreter exit nothing is closed: gRPC's threads are
    stopped, so a close would wait forever, and the exit frees the sockets."""
    if sys.is_finalizing():
        return
    if on_grpc_thread():
        wait = 0.0  # the close needs this very thread: it completes once this returns
    closing = []
    for conn in connections:
        thread = threading.Thread(target=conn._channel.close, daemon=True,
                                  name=f"conveyor-close {conn.address}")
        try:
            thread.start()
        except RuntimeError:  # (Python 3.12.1 starts no thread in an atexit hook)
            continue  # the channel stays open, and the process's end frees its sockets
        closing.append((conn, thread))
    deadline = time.monotonic() + wait
    for conn, thread in closing:
        thread.join(max(0.0, deadline - time.monotonic()))
        if thread.is_alive() and wait:
            log.warning("conveyor: the channel to %s did not close within %.1f s; it "
                        "closes in the background", conn.address, wait)


def _error_info(exc: grpc.RpcError) -> tuple[str, dict[str, str]]:
    """The reason and metadata of the call's ``ErrorInfo`` detail ("" and {} if none)."""
    try:
        status = rpc_status.from_call(exc)
    except ValueError:  # details that do not match the code and message
        return "", {}
    for detail in status.details if status is not None else ():
        info = error_details_pb2.ErrorInfo()
        if detail.Unpack(info) and info.domain == errors.DOMAIN:
            return info.reason, dict(info.metadata)
    return "", {}


def error_of(exc: grpc.RpcError) -> errors.ConveyorError:
    """The ``conveyor.errors`` class the server raised (by the reason it sent, else by the
    status code), with its message and metadata."""
    code = exc.code().name if exc.code() is not None else "UNKNOWN"
    reason, metadata = _error_info(exc)
    cls = errors.BY_REASON.get(reason) or errors.BY_CODE.get(code, errors.ConveyorError)
    err = cls.__new__(cls)
    errors.ConveyorError.__init__(err, exc.details() or code, **metadata)
    if isinstance(err, errors.SpecError):
        err.op, err.argument = metadata.get("op", ""), metadata.get("argument") or None
    err.code = code
    trailing = {k: v for k, v in exc.trailing_metadata() or () if isinstance(v, str)}
    err.checkpoint_id = trailing.get(CHECKPOINT_ID_KEY)  # type: ignore[attr-defined]
    batches = trailing.get(CHECKPOINT_BATCHES_KEY)
    err.checkpoint_batches = int(batches) if batches else None  # type: ignore[attr-defined]
    return err


def on_grpc_thread() -> bool:
    """Whether this is one of gRPC's own threads (its channel spin thread runs the calls'
    done-callbacks, and any finaliser the garbage collector happens to run there). A thread
    gRPC started runs a function of its ``cygrpc`` module; should that change, a close
    there still ends, after ``CLOSE_WAIT_S``."""
    target = getattr(threading.current_thread(), "_target", None)
    return getattr(target, "__module__", "") == "grpc._cython.cygrpc"


#: An adapter's ``hint`` to ``server_targets``: a pipeline object given as the servers (as
#: DALI's iterators take one) is the likely mistake.
PIPELINE_HINT = (" (the pipeline is not passed here: the servers run it from spec, the third "
                 "argument, e.g. ConveyorDataset('host:port', 'name', my_pipeline(...)))")


def server_targets(servers: object, who: str, argument: str = "servers",
                   hint: str = "") -> list[str]:
    """The targets ``servers`` names, as ``Client`` and the adapters take them: a server
    address (``"host:port"``), several separated by commas, or a DNS name resolving to
    several, or a list (any sequence) of such strings. Anything else is a TypeError naming
    ``who`` (the caller), its ``argument`` and the type given, raised at once (an endless
    iterable, a pipeline object, would otherwise be read forever), ending with ``hint``.
    ``InvalidArgument`` when no address is left."""
    wanted = ('the address of a Conveyor server ("host:port"), several (a list of them, '
              'or one string "host1:port,host2:port"), or a DNS name that resolves to '
              'every server')
    if isinstance(servers, str):
        given: Sequence[object] = [servers]
    elif isinstance(servers, Sequence) and not isinstance(servers, (bytes, bytearray)):
        given = servers
    else:
        raise TypeError(f"{who}: {argument} must be {wanted}; got {_type_name(servers)}"
                        f"{hint}")
    for index, item in enumerate(given):
        if not isinstance(item, str):
            raise TypeError(f"{who}: {argument} must be {wanted}; item {index} is "
                            f"{_type_name(item)}, not a string")
    targets = [t.strip() for item in given for t in str(item).split(",") if t.strip()]
    if not targets:
        raise errors.InvalidArgument(f"{who}: {argument} names no server: pass {wanted}")
    return targets


def _type_name(value: object) -> str:
    """``value``'s type as ``module.Name`` (builtins: ``Name``), with its value when short."""
    if value is None:
        return "None"
    kind = type(value)
    name = kind.__qualname__ if kind.__module__ == "builtins" else \
        f"{kind.__module__}.{kind.__qualname__}"
    shown = repr(value) if isinstance(value, (int, float, bytes)) else ""
    return f"{name} {shown}" if shown and len(shown) <= 40 else f"a {name} object"


def addresses(targets: Sequence[str]) -> list[str]:
    """Every server address the targets name, in order, without repeats: a host name that
    resolves to several addresses gives each (``"ip:port"``); one that does not resolve is
    kept as it is (gRPC will say why it cannot connect)."""
    found: list[str] = []
    for target in targets:
        host, port = host_port(target, "target")
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError:
            infos = []
        ips = sorted({str(info[4][0]) for info in infos})
        resolved = [target] if len(ips) <= 1 else [
            f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}" for ip in ips]
        found += [a for a in resolved if a not in found]
    return found


#: What the client was doing, by the RPC it called, in its user's words.
ACTIONS = {"JoinJob": "opening a pipeline", "CreatePipeline": "creating a pipeline",
           "Restore": "restoring a pipeline", "Checkpoint": "checkpointing a pipeline",
           "DescribePipeline": "describing a pipeline", "DeletePipeline": "deleting a pipeline",
           "ListPipelines": "listing pipelines", "ListCheckpoints": "listing checkpoints",
           "GetCheckpoint": "reading a checkpoint", "ListServers": "listing the servers"}
#: What gRPC says where nothing answers at an address.
NO_SERVER_SIGNS = ("failed to connect to all addresses", "DNS resolution failed")


def say_where_it_failed(exc: errors.Unavailable, server: str, others: list[str], what: str,
                        *, failover: bool = True) -> None:
    """Reword ``exc``, to be raised as it is (gRPC says only "Stream removed", "Socket
    closed", "failed to connect"): the server that failed for ``what`` (an RPC's name is
    said as what the client was doing), whether anything answers there, and why nothing
    failed over: failover off, no other server address given (and how to give one), or
    none of the ``others`` could take over."""
    if not failover:
        why = "failover is off (Client(failover=False))"
    elif not others:
        why = ("no other server address was given to fail over to: give the client "
               "several (a list, or one string \"host1:port,host2:port\") or a DNS name "
               "that resolves to every server")
    else:
        why = (f"none of the other servers ({', '.join(others)}) could take over (the "
               "conveyor.client log says why)")
    failed = f"failed while {ACTIONS[what]}" if what in ACTIONS else f"failed for {what}"
    detail = exc.message
    if any(sign in detail for sign in NO_SERVER_SIGNS):
        detail = f"nothing answers there: is it running? is the address right? ({detail})"
    text = f"server {server} {failed}: {detail}; {why}"
    exc.message, exc.args = text, (text,)


def wait_for_the_end(call: Any, within: float) -> None:
    """Wait up to ``within`` seconds for a stream's call to end (the server ends it once it
    has the consumer's last count).

    The end reaches this side only after the frames the server sent before it, received and
    not read yet: they are read and dropped here (batches past the count acknowledged, so
    nothing is lost), and the call is cancelled at the deadline if it has not ended by
    then. Only waiting for the end would wait out the whole deadline whenever frames were
    in flight, which is every close after a ``run()``. On one of gRPC's own threads (a
    close from a call's done-callback) nothing is read: that thread is the one that would
    deliver the frames, so the wait is for the end alone, up to ``within``."""
    if on_grpc_thread():
        wait_for_the_done_callback(call, within)
        return
    deadline_cancel = threading.Timer(within, call.cancel)
    deadline_cancel.daemon = True
    try:
        deadline_cancel.start()
    except RuntimeError:  # no new thread at the interpreter's exit: wait for the end only
        wait_for_the_done_callback(call, within)
        return
    try:
        for _frame in call:
            pass
    except grpc.RpcError as end:  # the end: CANCELLED by the server, or by the deadline
        # The error raised is the call itself: its traceback holds this frame, which holds
        # the call, a cycle only the collector would end (at the interpreter's exit, maybe,
        # where a collected call takes a lock a stopped gRPC thread may hold).
        end.__traceback__ = None
    finally:
        # Ended before it fired: its thread ends at once, and with it the last reference it
        # holds to the call (a call collected at the interpreter's exit takes its lock,
        # which a gRPC thread stopped by the exit may hold).
        deadline_cancel.cancel()
        deadline_cancel.join()


def wait_for_the_done_callback(call: Any, within: float) -> None:
    ended = threading.Event()
    call.add_done_callback(lambda _call: ended.set())
    ended.wait(within)
