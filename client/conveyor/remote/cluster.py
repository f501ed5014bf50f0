"""The servers a client knows: a connection to each, and calls with failover or placement.

A cluster is given one or more servers: a list of addresses, or a DNS name that resolves
to several (a headless Service), or one seed address. It learns the rest of the fleet from
the records the servers keep of themselves in the Redis they share (``fleet``, through any
of them): the servers it knows (``servers``) are those its targets name and those the
records named when it last asked. ``call`` goes to the first server that answers (the one
that answered last, then the others, DNS asked again each time); ``placed`` sends a new
pipeline's call to a lightly loaded live server of the fleet (``placement.py``). Calls to a
given server go ``via`` it. The remote pipeline, its fan-in and ``Client.open`` stand on
this; ``conveyor.Client`` is this with the pipeline calls on top.

**One name per server.** A server names itself by the address it advertises (the fleet's
records, a pipeline's holder), which need not be the one the trainer reached it at (a
host name against an IP, a Service's name). Every call's answer says the advertised name
(``Connection.heard``), and the cluster keeps both: ``reach`` turns a name a server gave
into the address this client uses for it, ``fleet`` and ``servers`` speak of the servers
by those addresses (a target the fleet names under another name is asked its name once),
and ``known_as`` says a server in a message, its advertised name beside it where the two
differ. So a dead server is never "another" server to fail over to, and a fan-in's
workers are the addresses the trainer gave.

**At exit.** The clusters still open when the interpreter exits are closed by an ``atexit``
hook (``close_at_exit``), while gRPC's threads still run. After the hooks Python stops
every daemon thread where it stands, gRPC's too; one stopped while it held its call's
lock (sending an acknowledgement, handling its event) holds it forever, and a close later
in the exit (a data loader's generator finalised in the interpreter's teardown, gRPC's
own finaliser of a call) waited forever for that lock. Closed by the hook, a client has
nothing left for those finalisers to close.
"""

from __future__ import annotations

import atexit
import logging
import os
import random
import threading
import weakref
from collections.abc import Sequence
from typing import Any, Literal, Protocol

from conveyor import errors
from conveyor.remote.placement import Placement
from conveyor.transport.channel import (
    AUTHORIZATION_KEY,
    KEEPALIVE_TIME_S,
    KEEPALIVE_TIMEOUT_S,
    bearer,
)
from conveyor.transport.connection import (
    Connection,
    addresses,
    close_connections,
    say_where_it_failed,
    server_targets,
)
from conveyor.transport.credentials import TlsOptions, read_token
from conveyor.v1 import service_pb2

log = logging.getLogger("conveyor.client")
#: The longest a target is waited for when asked its advertised name (``fleet``).
NAME_WAIT_S = 2.0


class Closable(Protocol):
    def close(self) -> None: ...


class Cluster:
    """The servers of ``target``, their connections, and calls to them (see the module)."""

    def __init__(self, target: str | Sequence[str], *, timeout: float = 30.0,
                 token: str | None = None, token_file: str | None = None,
                 tls: TlsOptions | Literal[False] | None = None,
                 stream_timeout: float | None = None,
                 keepalive_s: float = KEEPALIVE_TIME_S,
                 keepalive_timeout_s: float = KEEPALIVE_TIMEOUT_S,
                 failover: bool = True,
                 placement_seed: int | random.Random | None = None,
                 place: bool = True, data_channel: bool = True) -> None:
        """``target``: a server address, several (a list, or comma-separated), or a DNS
        name resolving to several. ``keepalive_s`` / ``keepalive_timeout_s``: while a call
        is open, ping the server this often and fail the call (UNAVAILABLE) if it does not
        answer within the timeout, so a dead or stopped server never blocks the trainer.
        ``failover``: a ``RemotePipeline`` whose server dies, stops answering or drains is
        resumed on another server at the trainer's position (see ``remote/pipeline.py``).
        ``token`` / ``token_file``: the bearer token, or the file holding it (else
        ``$CONVEYOR_TOKEN_FILE``, else ``$CONVEYOR_TOKEN``). ``tls``: verify the servers'
        certificate and present this client's (None: ``TlsOptions.from_env()``, the
        ``CONVEYOR_TLS_*`` variables, plaintext without any; False: plaintext whatever the
        environment says); see ``transport/credentials.py``.

        New pipelines (``create``, ``open``, ``restore`` without ``via``) are placed by two
        random choices weighted by free capacity: two live servers drawn with weights of
        their free pipeline slots times their idle fraction, the less loaded of the two
        taking it; draining and full servers are skipped. The fleet is learnt from the
        servers' records in Redis through any target (``remote/placement.py``).
        ``placement_seed``: the seed (or the ``random.Random``) of those draws, for a
        repeatable placement; None: a fresh one. ``place``: False sends new pipelines to
        the targets too, as every other call (a server creating its own configured
        pipelines through its API).

        ``data_channel``: receive batch bytes on a data channel of each stream and fan-in
        call (a TCP connection to the server's data port, outside gRPC's messages; see
        ``transport/data_channel.py``) where the server offers one; a server whose data port
        cannot be reached sends them in gRPC frames (said once in the log). False: always in
        gRPC frames."""
        self.targets = server_targets(target, "conveyor.Client", "target")
        self.target = self.targets[0]
        self.timeout = timeout
        self.stream_timeout = stream_timeout
        self.failover = failover
        token = read_token(token, token_file)
        self.tls = TlsOptions.from_env() if tls is None else tls or None
        self._metadata = ((AUTHORIZATION_KEY, bearer(token)),) if token else ()
        self._keepalive = (keepalive_s, keepalive_timeout_s)
        self.data_channel = data_channel
        self._lock = threading.Lock()
        self._connections: dict[str, Connection] = {}
        #: What was handed out over these connections (the remote pipelines), closed first.
        self._adopted: weakref.WeakSet[Closable] = weakref.WeakSet()
        self._preferred = self.targets[0]
        #: The servers the fleet's records named when last asked (their advertised
        #: addresses), and whether they were asked yet.
        self._learnt: tuple[str, ...] = ()
        self._asked_fleet = False
        #: Each server's advertised name by the address this client reached it at; the
        #: targets asked their name once (``fleet``).
        self._advertised: dict[str, str] = {}
        self._asked_name: set[str] = set()
        self._placement = None if not place else Placement(
            placement_seed if isinstance(placement_seed, random.Random)
            else random.Random(placement_seed))
        _OPEN_AT_EXIT.add(self)

    @property
    def preferred(self) -> str:
        """The server that answered the last call (the first target at the start)."""
        return self._preferred

    def adopt(self, handed_out: Closable) -> None:
        """Remember ``handed_out`` (as long as it lives), so that ``close()`` closes it
        first: a remote pipeline's stream ends before its connection."""
        with self._lock:
            self._adopted.add(handed_out)

    def connection(self, address: str) -> Connection:
        """The (shared) connection to ``address``."""
        with self._lock:
            conn = self._connections.get(address)
            if conn is None:
                conn = self._connections[address] = Connection(
                    address, self._metadata, self._keepalive, self.tls, self.targets,
                    self.data_channel, on_name=self._named)
            return conn

    def _named(self, address: str, advertised: str) -> None:
        with self._lock:
            self._advertised[address] = advertised

    def reach(self, name: str) -> str:
        """The address this client uses for the server a server named ``name`` (its
        advertised address, as in a holder or the fleet's records); ``name`` itself when
        it is one, or when no call answered from that server yet."""
        with self._lock:
            if not name or name in self._advertised:
                return name
            return next((a for a, n in self._advertised.items() if n == name), name)

    def known_as(self, name: str) -> str:
        """A server as a message says it: the address this client uses for it, with its
        advertised name beside it where the two differ."""
        address = self.reach(name)
        with self._lock:
            advertised = self._advertised.get(address, "")
        if advertised and advertised != address:
            return f"{address} (advertised as {advertised})"
        return address

    def servers(self) -> list[str]:
        """Every server this cluster knows, by the address it uses for each: those the
        targets name now (DNS is asked again each time), then those the fleet's records
        named when last asked."""
        named = addresses(self.targets)
        learnt = [self.reach(a) for a in self._learnt]
        return named + [a for a in dict.fromkeys(learnt) if a not in named]

    def fleet(self, *, via: str | None = None) -> list[service_pb2.ServerInfo]:
        """The live servers with their capacity and load, as they last published them,
        asked of ``via`` or the first server that answers; remembered for ``servers``.
        Each record's ``address`` is the one this client uses for that server
        (``reach``)."""
        reply = self.call("ListServers", service_pb2.ListServersRequest(), via=via)
        found = list(reply.servers)
        self._asked_fleet = True
        self._learnt = tuple(s.address for s in found if s.address)
        self._ask_targets_their_names(self._learnt)
        for server in found:
            server.address = self.reach(server.address)
        return found

    def _ask_targets_their_names(self, advertised: Sequence[str]) -> None:
        """Where the fleet names a server no address of this client is known to reach,
        ask each target whose name is not known yet for it (once, all at once, for at
        most ``NAME_WAIT_S``): a target that answers under another name is matched."""
        targets = addresses(self.targets)
        with self._lock:
            known = set(self._advertised.values())
            unmatched = [a for a in advertised if a not in targets and a not in known]
            asked = [a for a in targets
                     if a not in self._advertised and a not in self._asked_name]
            if not unmatched or not asked:
                return
            self._asked_name.update(asked)
        calls = [(conn, conn.ask_name(NAME_WAIT_S))
                 for conn in map(self.connection, asked)]
        for conn, call in calls:
            if call.exception() is None:  # (within the call's own deadline)
                conn.heard(call)

    def learn_fleet(self, *, again: bool = False, avoid: str | None = None) -> None:
        """Ask for the fleet's records if they were never asked (``again``: in any case),
        so that a pipeline opened through one seed address can fail over to the servers
        the seed knows; ``avoid``: not of that server (it just failed), but of each other
        known one in turn. A server from before the records, or none answering, leaves
        the servers known as they were: this never raises."""
        if self._asked_fleet and not again:
            return
        asked: list[str | None] = [None] if avoid is None else \
            [a for a in self.servers() if a != avoid]
        for address in asked:
            try:
                self.fleet(via=address)
                return
            except errors.ConveyorError as exc:
                log.debug("conveyor: could not learn the fleet: %s", exc)
        self._asked_fleet = True  # (servers without records, or none answered: as they were)

    def call(self, method: str, request: Any, timeout: float | None = None, *,
             via: str | None = None) -> Any:
        """Call ``via`` that server, or the first that answers (UNAVAILABLE: the next)."""
        if via is not None:
            return self.connection(via).call(method, request, timeout or self.timeout)
        try:
            return self.connection(self._preferred).call(method, request,
                                                         timeout or self.timeout)
        except errors.Unavailable as exc:
            if isinstance(exc, errors.Draining):
                raise
            failure = exc
        # Only now are the other servers looked up (DNS is asked again each time).
        others = [a for a in self.servers() if a != self._preferred]
        for address in others:
            try:
                reply = self.connection(address).call(method, request,
                                                      timeout or self.timeout)
            except errors.Unavailable as exc:
                if isinstance(exc, errors.Draining):
                    raise
                continue
            self._preferred = address
            return reply
        self.say_where_it_failed(failure, self._preferred, method)
        raise failure

    def say_where_it_failed(self, exc: errors.Unavailable, server: str, what: str, *,
                            failover: bool = True) -> None:
        """Reword ``exc`` (``connection.say_where_it_failed``) with ``server`` and the
        others this cluster knows, each as ``known_as`` says it."""
        others = [self.known_as(a) for a in self.servers() if a != server]
        say_where_it_failed(exc, self.known_as(server), others, what, failover=failover)

    def placed(self, method: str, request: Any) -> tuple[Any, str]:
        """``method`` (CreatePipeline, Restore) on the server placement chooses: the reply
        and the address of the server that answered it. Without placement, or without a
        fleet to choose from, the first server that answers takes it."""
        if self._placement is None:
            return self.call(method, request), self._preferred
        try:
            servers = self.fleet()
        except errors.ConveyorError as exc:
            if getattr(exc, "code", "") != "UNIMPLEMENTED":
                raise
            servers = []  # servers from before the fleet records
        refused: set[str] = set()
        while (chosen := self._placement.choose(servers, frozenset(refused))) is not None:
            try:
                return self.connection(chosen.address).call(method, request,
                                                            self.timeout), chosen.address
            except (errors.ResourceExhausted, errors.Unavailable,
                    errors.EngineMismatch) as exc:
                # Full since it published, draining, gone, not reachable at the address it
                # advertises, or (a restore) computing other bytes than the checkpoint's
                # server: choose again among the rest.
                log.info("conveyor: %s did not take %s: %s", chosen.address, method,
                         exc.message)
                refused.add(chosen.address)
        # None could: the first server that answers takes it, or says why it cannot.
        return self.call(method, request), self._preferred

    def close(self) -> None:
        """Close every connection (their streams are cancelled); within
        ``connection.CLOSE_WAIT_S`` whatever state the servers are in, and from any thread
        or finaliser (see ``connection.py``). What it handed out is closed first (a remote
        pipeline: its stream's request thread ends, its call is cancelled and let go of), so
        no call is left for gRPC's threads to finish. It may be used again afterwards: it
        connects anew. One not closed is closed as the interpreter exits
        (``close_at_exit``)."""
        with self._lock:
            adopted = list(self._adopted)
        for handed_out in adopted:
            handed_out.close()
        with self._lock:
            connections = list(self._connections.values())
            self._connections.clear()
        close_connections(connections)


#: This process's clusters (weakly: one dropped leaves), closed by ``close_at_exit``.
_OPEN_AT_EXIT: weakref.WeakSet[Cluster] = weakref.WeakSet()


def close_at_exit() -> None:
    """Close every cluster (every client) of this process (an ``atexit`` hook; see the
    module's doc): their pipelines' streams end, their last acknowledgements are sent,
    their channels close, all while gRPC's threads can still finish what they hold."""
    for cluster in list(_OPEN_AT_EXIT):
        try:
            cluster.close()
        except Exception:  # (one client's failure leaves the others to close)
            log.exception("conveyor: closing a client at exit failed")


atexit.register(close_at_exit)
# A forked child's copies of its parent's clients are not its own to close: the parent's
# gRPC threads do not run there, and a lock one of them held stays held in the child.
os.register_at_fork(after_in_child=_OPEN_AT_EXIT.clear)
