"""Where a new pipeline goes: a lightly loaded live server of the fleet.

Every server publishes a short-lived record of itself in the Redis the servers share (its
address, capacity and load; it drops out within seconds of dying), and any server lists
them (``ListServers``). So the client learns the whole fleet through whichever of its
targets answers: a DNS name resolving to several (a headless Service), a static list, or
one seed address.

The choice is "two random choices weighted by free capacity": two different servers are
drawn at random, each with a weight of its free pipeline slots (``max_pipelines -
pipelines``) times its idle fraction (``1 - busy``, at least ``MIN_IDLE``), and the less
loaded of the two takes the pipeline (load: the fraction of its pipeline slots in use plus
its busy fraction). A draining server, or a full one (``max_pipelines`` reached), weighs
nothing and is never drawn. Two choices keep a fleet even under many clients placing at
once, without all of them rushing to the one emptiest server.

The pipeline is then created (or restored) on the chosen server, over a connection with
the client's own credentials and TLS (``Cluster.placed``, ``cluster.py``). A server that
refuses it as full or draining, or cannot be reached (its record outlives it by a few
seconds), or refuses a restore for its engine (``EngineMismatch``: a fleet of mixed
versions), is left out and the choice made again among the rest. Without a fleet to
choose from (servers from before ``ListServers``, none published yet, or none of them
reachable at the address it advertises, which must then be set: ``advertise``) the call
goes to the first server that answers, as every other call does.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from conveyor.v1 import service_pb2

#: The least idle fraction a server is weighed with: a fully busy server with free slots
#: is still drawn now and then (its busy fraction is a recent average, not a promise).
MIN_IDLE = 0.1


def free_slots(server: service_pb2.ServerInfo) -> int:
    """The pipelines ``server`` may still take (0: draining or full)."""
    if server.draining or not server.address:
        return 0
    return max(0, server.max_pipelines - server.pipelines)


def weight(server: service_pb2.ServerInfo) -> float:
    """How likely ``server`` is drawn: its free slots times its idle fraction."""
    return free_slots(server) * max(MIN_IDLE, 1.0 - server.busy)


def load(server: service_pb2.ServerInfo) -> float:
    """How loaded ``server`` is: the fraction of its pipeline slots in use plus the
    fraction of its worker threads' time spent computing."""
    used = server.pipelines / server.max_pipelines if server.max_pipelines else 1.0
    return used + server.busy


class Placement:
    """The draw of two random choices (``rng``: seeded for a repeatable placement)."""

    def __init__(self, rng: random.Random | None = None) -> None:
        self.rng = rng or random.Random()

    def choose(self, servers: Sequence[service_pb2.ServerInfo],
               exclude: frozenset[str] = frozenset()) -> service_pb2.ServerInfo | None:
        """The server a new pipeline goes to (None: none may take one)."""
        candidates = [s for s in servers if s.address not in exclude and weight(s) > 0]
        if not candidates:
            return None
        first = self._draw(candidates)
        rest = [s for s in candidates if s is not first]
        if not rest:
            return first
        second = self._draw(rest)
        return min((first, second), key=load)  # the first drawn on a tie

    def _draw(self, candidates: Sequence[service_pb2.ServerInfo]) -> service_pb2.ServerInfo:
        return self.rng.choices(candidates, weights=[weight(s) for s in candidates])[0]
