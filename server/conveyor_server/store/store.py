"""Pipeline names and checkpoints in Redis.

Keys of one pipeline share the hash tag ``{name}``, so a Redis Cluster keeps them on one
slot and the Lua scripts (``scripts/``) stay atomic:

    conveyor:{name}:owner      hash: holder, instance, generation, fingerprint, keep,
                               latest (the newest checkpoint's seq), latest_id (its id),
                               creator (the identity that created it: who may use it),
                               run_id (the training run consuming it), claim (the token
                               of the create or take-over that wrote it), claimed_from
                               (the holder a take-over took it from)
    conveyor:{name}:gen        the name's generation counter (survives delete: a zombie
                               from before a delete and re-create is still fenced)
    conveyor:{name}:seq        checkpoint sequence counter
    conveyor:{name}:lease      the holder's instance, expiring unless renewed (survives delete too)
    conveyor:{name}:ckpts      sorted set of retained checkpoint sequence numbers
    conveyor:{name}:ckpt:<seq> hash: blob, sha256, batches, created_ms, server, generation,
                               nonce, creator and run_id (the owner's, when it was written)
    conveyor:{name}:written:<random>  a checkpoint write's mark: its seq (MARK_S at least)
    conveyor:{name}:released   the last delete's token and the holder it released
    conveyor:pipelines         set of claimed names (for listing)
    conveyor:listing:<sha256>  a reader's compressed file listing, by its digest (kept 30
                               days after last use; names the first changed file when a
                               restore finds the data changed)

A checkpoint id is ``<pipeline>:<seq>-<nonce>``: ``nonce`` is 16 lowercase hex digits, 12
drawn at random for each write and 4 that check the whole id (``sealed_nonce``), kept in the
checkpoint's hash (``ids.py``), so an id names one checkpoint for all time, and an id no
server wrote (mistyped, made up) is told apart from one whose number was reused. A sequence number
alone can come back (a Redis failover that loses the last writes rolls the counter back;
servers before this format deleted the counter with the name), and reading an id whose
nonce is not the stored one is NotFound, never another checkpoint. Ids ``<pipeline>:<seq>``
from older servers are still read, but only while the checkpoint at that sequence has no
nonce (was written by an older server).

Writes are the Lua scripts in ``scripts/`` (read once per process, registered once per
``Store``, run by their SHA). The name set is updated by the same script as the owner,
except on a Redis Cluster, where it lives in another slot and is updated by a second
command just after (listing then checks each name's owner, so a name is never listed after
its owner key is gone).

The records read back (owner, checkpoint) are in ``records.py``; those written before
creators were recorded belong to ``ANONYMOUS``. Every call has a timeout; one that fails
because the primary is changing (a failover) is tried again for ``failover`` seconds at most
(``failover.py``), so every write here can be tried again without being applied twice: a
take-over or create records its claim token in the owner (``claim``), a checkpoint leaves
a short-lived mark of its random nonce (``conveyor:{name}:written:<random>``, holding its
sequence) and a delete one of its token (``conveyor:{name}:released``); a script that finds
its own mark answers what it did the first time. A write confirmed by ``WAIT`` sends both on
one connection and is tried again as one. Redis errors become ``Unavailable`` naming the
address without credentials, saying how long the call was tried and what to do.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import time
from collections.abc import Callable
from importlib import resources
from typing import Any

import redis
from redis.exceptions import ReadOnlyError, RedisClusterException

from conveyor.errors import (
    AlreadyExists,
    CorruptCheckpoint,
    FailedPrecondition,
    Fenced,
    InvalidArgument,
    NotFound,
    Unavailable,
)
from conveyor_server.store.connect import Connection, RedisConfig, connect
from conveyor_server.store.failover import Failover, Outlasted, ReplicasBehind
from conveyor_server.store.ids import (
    checkpoint_id,
    new_nonce,
    parse_checkpoint_id,
    sealed_nonce,
    written_by_a_server,
)
from conveyor_server.store.records import ANONYMOUS, Owner, StoredCheckpoint, owner_of

log = logging.getLogger("conveyor.server")
PIPELINES_KEY = "conveyor:pipelines"
#: A holder renews its lease on a name every third of this; a name whose lease ran out may
#: be created anew (and any server may restore it, as always).
LEASE_S = 30.0
#: How long a reader's file listing is kept after its pipeline last used it (30 days).
LISTING_TTL_S = 30 * 24 * 3600
#: The shortest life of a write's mark (a checkpoint's, a delete's), by which a write tried
#: again over a failover finds that it was applied; at least four failover windows.
MARK_S = 60.0


def _listing_key(digest: bytes) -> str:
    return f"conveyor:listing:{digest.hex()}"


def _k(name: str, suffix: str) -> str:
    return f"conveyor:{{{name}}}:{suffix}"


@functools.cache
def lua_script(name: str) -> str:
    """The text of ``scripts/<name>.lua``, read once per process."""
    return (resources.files(__package__) / "scripts" / f"{name}.lua").read_text()


class Store:
    def __init__(self, where: str | Connection, *, timeout: float = 1.0,
                 min_replicas: int = 0, replica_timeout: float = 1.0,
                 lease: float = LEASE_S, failover: float = 0.0) -> None:
        """``where``: a redis:// / rediss:// / unix:// URL, or a ``Connection`` made by
        ``connect.connect`` (Sentinel, Cluster, TLS files). ``min_replicas``: a take-over or
        checkpoint write returns only once that many replicas have it (Redis ``WAIT``,
        within ``replica_timeout`` seconds), else it fails with UNAVAILABLE: a failover of
        an asynchronously replicated Redis then cannot lose a fence or a checkpoint the
        trainer was told about. ``failover``: how long a call that fails as the primary
        changes is tried again (``redis.failover_s``; 0, the default here: at once)."""
        if isinstance(where, str):
            where = connect(RedisConfig(url=where, timeout_s=timeout))
        self.address = where.address
        self.cluster = where.cluster
        self.timeout = timeout
        if min_replicas and where.cluster:
            raise InvalidArgument("redis.min_replicas is not supported with a Redis Cluster "
                                  "(WAIT is per node): set it to 0")
        self.min_replicas = min_replicas
        self.replica_timeout = replica_timeout
        #: How long a name stays held without its holder renewing it (seconds).
        self.lease = lease
        self._lease_ms = int(lease * 1000)
        self._mark_ms = int(max(MARK_S, 4 * failover) * 1000)
        # An attempt takes the timeout at most, and a write's WAIT its own timeout more.
        attempt = timeout + (replica_timeout if min_replicas else 0.0)
        self.failover = Failover(failover, attempt, self.address)
        # Typed as Any: redis-py's stubs type replies as bytes | str whatever decoding is on.
        self._redis: Any = where.client
        self._create = self._redis.register_script(lua_script("create"))
        self._take_over = self._redis.register_script(lua_script("take_over"))
        self._write = self._redis.register_script(lua_script("write_checkpoint"))
        self._release = self._redis.register_script(lua_script("release"))
        self._renew = self._redis.register_script(lua_script("renew"))

    def _call(self, what: str, fn: Callable[[], Any]) -> Any:
        """``fn()``, tried again over a failover (``failover.py``); a Redis error is
        ``Unavailable``."""
        try:
            return self.failover.run(what, fn)
        except Outlasted as out:
            raise Unavailable(self._failed(what, out.last) + self._tried(out)) from None
        except (redis.ConnectionError, redis.TimeoutError, RedisClusterException,
                redis.ResponseError, OSError) as exc:
            raise Unavailable(self._failed(what, exc)) from None

    def _failed(self, what: str, exc: Exception) -> str:
        if isinstance(exc, ReplicasBehind):
            return (f"{exc.what} reached {exc.acked} of the {self.min_replicas} Redis "
                    f"replicas required (redis.min_replicas) within "
                    f"{self.replica_timeout:g} s: it may be lost if the primary fails now, "
                    "so it is not confirmed")
        if isinstance(exc, ReadOnlyError):
            return (f"Redis at {self.address} refused {what}: it is a read-only replica, "
                    "not the primary")
        if isinstance(exc, redis.ResponseError):
            return f"Redis at {self.address} refused {what}: {exc}"
        return f"Redis at {self.address} is unreachable ({what}): {type(exc).__name__}"

    def _tried(self, out: Outlasted) -> str:
        """What the failover window did, and the next step."""
        window = self.failover.window_s
        if not window:
            return ""
        if out.by_deadline:
            return (f"; tried for {out.tried_s:.1f} s, until the caller's deadline: a "
                    "failover may still be under way; try again, or call with a longer "
                    "deadline")
        tried = f"; tried for {out.tried_s:.1f} s (redis.failover_s: {window:g} s)"
        if isinstance(out.last, ReplicasBehind):
            return (f"{tried} and the replicas did not catch up: check that they run and "
                    "follow the primary (or lower redis.min_replicas)")
        return (f"{tried} and no primary answered: Redis is down, or fails over slower "
                "than that; check that Redis (and its Sentinels) runs and this server "
                "reaches it, then try again")

    def _confirmed(self, script: Any, keys: list[str], args: list[Any]) -> tuple[Any, int]:
        """Run ``script``; with ``min_replicas``, then ``WAIT`` on the same connection.
        Returns its reply and how many replicas have it (0 when none are required)."""
        if not self.min_replicas:
            return script(keys=keys, args=args), 0
        pipe = self._redis.pipeline(transaction=False)
        script(keys=keys, args=args, client=pipe)
        pipe.wait(self.min_replicas, int(self.replica_timeout * 1000))
        reply, acked = pipe.execute()
        return reply, int(acked)

    def _require_replicas(self, acked: int, what: str) -> None:
        if self.min_replicas and acked < self.min_replicas:
            raise ReplicasBehind(acked, what)

    def ping(self) -> bool:
        return bool(self._call("ping", self._redis.ping))

    def close(self) -> None:
        self._redis.close()

    # -- names ---------------------------------------------------------------------

    def create(self, name: str, holder: str, instance: str, fingerprint: str, keep: int,
               creator: str = ANONYMOUS, run_id: str = "") -> int:
        """Claim a free name for ``creator``, or its own whose holder's lease ran out."""
        keys = self._with_set([_k(name, "owner"), _k(name, "gen"), _k(name, "lease")])
        claim = new_nonce()  # the same in every try: a try finds an earlier one's claim
        ok, value = self._call("create", lambda: self._create(
            keys=keys, args=[name, holder, instance, fingerprint, keep, self._lease_ms,
                             creator, run_id, claim]))
        if not ok:
            raise AlreadyExists(f"pipeline {name!r} already exists, held by server "
                                f"{value.decode()}", holder=value.decode())
        self._update_set("sadd", name)
        return int(value)

    def take_over(self, name: str, holder: str, instance: str, fingerprint: str,
                  keep: int, creator: str = ANONYMOUS,
                  expect_creator: str | None = None, run_id: str = "") -> tuple[int, str]:
        """Claim ``name`` for this server, raising its generation, with ``creator`` as its
        creator. ``expect_creator``: the creator the caller was authorised against ("" for
        a free name); if the name changed hands since, nothing is taken over
        (FailedPrecondition). Returns (generation, previous holder or "")."""
        keys = self._with_set([_k(name, "owner"), _k(name, "gen"), _k(name, "lease")])
        expected = "-" if expect_creator is None else expect_creator
        args = [name, holder, instance, fingerprint, keep, self._lease_ms, creator, expected,
                run_id, new_nonce()]

        def claim() -> tuple[int, bytes]:
            (gen, previous), acked = self._confirmed(self._take_over, keys, args)
            if int(gen) > 0:
                self._require_replicas(acked, "the take-over")
            return int(gen), previous

        gen, previous = self._call("restore", claim)
        if gen < 0:
            raise FailedPrecondition(f"pipeline {name!r} changed hands while it was being "
                                     "restored: nothing was taken over; try again")
        self._update_set("sadd", name)
        return int(gen), previous.decode()

    def release(self, name: str, instance: str, keep_checkpoints: bool, *,
                force: bool = False, generation: int | None = None) -> str:
        """Release ``name`` (held by ``instance`` at ``generation`` if given, or by anyone
        with ``force``); returns the holder it had."""
        keys = self._with_set([_k(name, "owner"), _k(name, "ckpts"), _k(name, "gen"),
                               _k(name, "lease"), _k(name, "released")])
        args = [name, instance, int(keep_checkpoints), _k(name, "ckpt:"), int(force),
                "" if generation is None else generation, new_nonce(), self._mark_ms]
        ok, holder = self._call("delete", lambda: self._release(keys=keys, args=args))
        if not ok:
            if not holder:
                raise NotFound(f"pipeline {name!r} does not exist")
            raise Fenced(f"pipeline {name!r} is now held by server {holder.decode()}",
                         holder=holder.decode())
        self._update_set("srem", name)
        return str(holder.decode())

    def renew(self, name: str, instance: str) -> str | None:
        """Renew this server's lease on ``name``: None, or the holder now ("" once it was
        deleted) when this server no longer holds it."""
        ok, holder = self._call("renew the lease", lambda: self._renew(
            keys=[_k(name, "owner"), _k(name, "lease")], args=[instance, self._lease_ms]))
        return None if ok else str(holder.decode())

    def _with_set(self, keys: list[str]) -> list[str]:
        """The scripts' keys, plus the name set where it shares their slot."""
        return keys if self.cluster else [*keys, PIPELINES_KEY]

    def _update_set(self, command: str, name: str) -> None:
        """Cluster only: keep the listing set in step. Best effort: the claim itself is
        done, so a failure here is logged, never raised (listing checks owners anyway)."""
        if not self.cluster:
            return
        try:
            self._call("update the name set",
                       lambda: getattr(self._redis, command)(PIPELINES_KEY, name))
            if command == "srem" and self.owner(name) is not None:
                # Claimed again between our release and this removal: list it again.
                self._call("update the name set",
                           lambda: self._redis.sadd(PIPELINES_KEY, name))
        except Unavailable as exc:
            log.warning("could not update the name set for %s: %s", name, exc.message,
                        extra={"pipeline": name})

    def owner(self, name: str) -> Owner | None:
        raw = self._call("describe", lambda: self._redis.hgetall(_k(name, "owner")))
        return owner_of(name, raw)

    def owners(self, names: list[str]) -> dict[str, Owner | None]:
        def fetch() -> list[Any]:
            pipe = self._redis.pipeline(transaction=False)
            for name in names:
                pipe.hgetall(_k(name, "owner"))
            return pipe.execute()
        return {name: owner_of(name, raw)
                for name, raw in zip(names, self._call("read owners", fetch), strict=True)}

    def lease_holders(self, names: list[str]) -> dict[str, str]:
        """The instance holding each name's lease, "" where it ran out (or none was taken):
        a holder is alive while its instance holds the lease (``Owner.instance``)."""
        def fetch() -> list[Any]:
            pipe = self._redis.pipeline(transaction=False)
            for name in names:
                pipe.get(_k(name, "lease"))
            return pipe.execute()
        return {name: (raw or b"").decode()
                for name, raw in zip(names, self._call("read leases", fetch), strict=True)}

    def names(self) -> list[str]:
        raw = self._call("list", lambda: self._redis.smembers(PIPELINES_KEY))
        names = sorted(n.decode() for n in raw)
        if self.cluster and names:
            # The set is updated apart from the owner keys here: trust the owners.
            owners = self.owners(names)
            names = [n for n in names if owners[n] is not None]
        return names

    # -- checkpoints ---------------------------------------------------------------

    def write_checkpoint(self, name: str, instance: str, generation: int, blob: bytes,
                         batches: int, server: str) -> StoredCheckpoint:
        created = int(time.time() * 1000)
        sha = hashlib.sha256(blob).hexdigest()
        random_part = new_nonce()  # also marks this write, found by a try after a failover
        keys = [_k(name, "owner"), _k(name, "seq"), _k(name, "ckpts"),
                _k(name, f"written:{random_part}")]
        args: list[str | int | bytes] = [instance, generation, blob, sha, batches, created,
                                         server, _k(name, "ckpt:"), name, random_part,
                                         self._mark_ms]

        def write() -> tuple[int, Any]:
            (ok, value), acked = self._confirmed(self._write, keys, args)
            if ok:
                seq = int(value)
                self._require_replicas(acked, "checkpoint " + checkpoint_id(
                    name, seq, sealed_nonce(name, seq, random_part)))
            return ok, value

        ok, value = self._call("checkpoint", write)
        if not ok:
            holder = value.decode() if value else "nobody (deleted)"
            raise Fenced(f"pipeline {name!r} is now held by server {holder}: this server's "
                         "checkpoints are refused", holder=value.decode() if value else "")
        seq = int(value)
        nonce = sealed_nonce(name, seq, random_part)
        return StoredCheckpoint(checkpoint_id(name, seq, nonce), name, batches, created,
                                len(blob), server, generation, blob)

    def read_checkpoint(self, cid: str, *, with_blob: bool = True) -> StoredCheckpoint:
        """Exactly the checkpoint ``cid`` names, or NotFound (never another one that got
        its sequence number)."""
        name, seq, nonce = parse_checkpoint_id(cid)
        fields = ["batches", "created_ms", "server", "generation", "sha256", "nonce",
                  "creator", "run_id"]
        if with_blob:
            fields.append("blob")
        values = self._call("read checkpoint", lambda: self._redis.hmget(
            _k(name, f"ckpt:{seq}"), fields))
        stored_nonce = (values[5] or b"").decode()
        if values[0] is None or stored_nonce != nonce:
            raise NotFound(self._missing(cid, name, seq, nonce,
                                         None if values[0] is None else stored_nonce))
        blob = values[8] if with_blob else None
        if blob is not None and hashlib.sha256(blob).hexdigest() != values[4].decode():
            raise CorruptCheckpoint(f"checkpoint {cid!r} in Redis fails its integrity check")
        size = len(blob) if blob is not None else 0
        return StoredCheckpoint(cid, name, int(values[0]), int(values[1]), size,
                                values[2].decode(), int(values[3]), blob,
                                (values[6] or ANONYMOUS.encode()).decode(),
                                (values[7] or b"").decode())

    def _missing(self, cid: str, name: str, seq: int, nonce: str,
                 stored_nonce: str | None) -> str:
        """Why ``cid`` names no checkpoint, and what to do: ``stored_nonce`` is the nonce of
        the checkpoint numbered ``seq`` (None: there is none). Says nothing of the others."""
        listing = f"`conveyor checkpoints {name}` lists the ones kept"
        if nonce and not written_by_a_server(name, seq, nonce):
            return (f"no such checkpoint: {cid!r} is not an id a server wrote (mistyped?); "
                    f"{listing}")
        if stored_nonce is not None:
            # A real id (an older server's, which has no nonce, or one that passes the
            # check) whose number now holds another checkpoint: the counter came back.
            return (f"checkpoint {cid!r} no longer exists: its number was reused by a later "
                    f"checkpoint of {name!r} (a Redis failover lost the write, or an older "
                    f"server numbered a re-created pipeline anew); {listing}")
        written = int(self._call("read checkpoint",
                                 lambda: self._redis.get(_k(name, "seq"))) or 0)
        if seq > written:
            return (f"checkpoint {cid!r} does not exist: {name!r} has no checkpoint "
                    f"numbered {seq} (never written, or lost in a Redis failover); {listing}")
        return (f"checkpoint {cid!r} no longer exists: retired by retention "
                f"(keep_checkpoints) or deleted with its pipeline; {listing}")

    def list_checkpoints(self, name: str) -> list[StoredCheckpoint]:
        def fetch() -> list[Any]:
            seqs = self._redis.zrange(_k(name, "ckpts"), 0, -1)
            pipe = self._redis.pipeline(transaction=False)
            for s in seqs:
                key = _k(name, f"ckpt:{int(s)}")
                pipe.hmget(key, ["batches", "created_ms", "server", "generation", "nonce",
                                 "creator", "run_id"])
                pipe.hstrlen(key, "blob")
            return [seqs, pipe.execute()]
        seqs, rows = self._call("list checkpoints", fetch)
        out = []
        for i, s in enumerate(seqs):
            meta, size = rows[2 * i], rows[2 * i + 1]
            if meta[0] is None:
                continue  # retired between the two reads
            cid = checkpoint_id(name, int(s), (meta[4] or b"").decode())
            out.append(StoredCheckpoint(cid, name, int(meta[0]), int(meta[1]), int(size),
                                        meta[2].decode(), int(meta[3]),
                                        creator=(meta[5] or ANONYMOUS.encode()).decode(),
                                        run_id=(meta[6] or b"").decode()))
        return out


    # -- file listings ------------------------------------------------------------

    def has_listing(self, digest: bytes) -> bool:
        """Whether the listing is kept; keeping it another ``LISTING_TTL_S`` if so."""
        return bool(self._call("keep listing", lambda: self._redis.expire(
            _listing_key(digest), LISTING_TTL_S)))

    def get_listing(self, digest: bytes) -> bytes | None:
        value: bytes | None = self._call("read listing",
                                         lambda: self._redis.get(_listing_key(digest)))
        return value

    def put_listing(self, digest: bytes, listing: bytes) -> None:
        self._call("keep listing", lambda: self._redis.set(
            _listing_key(digest), listing, ex=LISTING_TTL_S, nx=True))
