"""Who may do what with a pipeline (authorisation; ``identity.py`` says who is calling).

A pipeline belongs to the identity that created it: its creator is kept in Redis with the
owner record and in each of its checkpoints, so every server knows it, also after a
restore elsewhere or a delete that kept the checkpoints. Only the creator, or an operator
(``auth.operators``), may describe, stream, checkpoint, restore, list the checkpoints of
or delete a pipeline, and read its checkpoints; anyone authenticated may create one under
a free name. Listing shows a caller its own pipelines only, an operator all of them.
Refusals are PERMISSION_DENIED naming the caller, the action and the pipeline, never the
creator or anything else of another tenant's. With authentication off, or in the loopback
mode, every caller is ``anonymous`` with every right, as before identities existed.

A restore takes the name over for the creator it keeps: the name's current creator if it
is held, else the checkpoint's, else (from raw checkpoint data) the caller. The take-over
in Redis is conditional on the creator checked here, so a name that changes hands between
the check and the take-over is never taken from its new creator.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import grpc

from conveyor.errors import PermissionDenied
from conveyor.v1 import service_pb2
from conveyor_server.service.hosted import HostedPipelines
from conveyor_server.service.identity import Authenticator, Caller
from conveyor_server.store.ids import check_name
from conveyor_server.store.store import Store, StoredCheckpoint


@dataclass(frozen=True)
class Claim:
    """What a restore may take: the creator to record, and the creator the name must still
    have in Redis when it is taken over (``""``: free)."""
    creator: str
    expect_creator: str


class Access:
    def __init__(self, authenticator: Authenticator, store: Store,
                 pipelines: HostedPipelines) -> None:
        self.authenticator = authenticator
        self._store = store
        self._pipelines = pipelines

    def caller(self, context: grpc.ServicerContext) -> Caller:
        return self.authenticator.identify(context)

    @staticmethod
    def may(caller: Caller, creator: str) -> bool:
        return caller.operator or caller.identity == creator

    def creator_of(self, name: str) -> str | None:
        """The creator of the pipeline ``name`` (None: nobody holds it). One hosted here
        answers from memory, so a stream's or a checkpoint's check costs no Redis call."""
        hosted = self._pipelines.get(name)
        if hosted is not None and hosted.ended is None:
            return hosted.creator
        owner = self._store.owner(name)
        return owner.creator if owner is not None else None

    def _deny(self, caller: Caller, action: str, what: str) -> PermissionDenied:
        return PermissionDenied(
            f"{caller.identity!r} may not {action} {what}: only the identity that created "
            "it, or an operator (auth.operators), may", identity=caller.identity)

    def require(self, context: grpc.ServicerContext, name: str, action: str) -> Caller:
        """The caller, if it may ``action`` the pipeline ``name``; PermissionDenied
        otherwise. A name nobody holds passes: the handler answers NOT_FOUND."""
        caller = self.caller(context)
        if caller.operator:
            return caller
        creator = self.creator_of(check_name(name))
        if creator is not None and creator != caller.identity:
            raise self._deny(caller, action, f"pipeline {name!r}")
        return caller

    def require_checkpoint(self, context: grpc.ServicerContext,
                           stored: StoredCheckpoint) -> None:
        caller = self.caller(context)
        if not self.may(caller, stored.creator):
            raise self._deny(caller, "read", f"checkpoint {stored.id!r}")

    def visible(self, context: grpc.ServicerContext,
                checkpoints: Sequence[StoredCheckpoint]) -> list[StoredCheckpoint]:
        """The checkpoints the caller may see."""
        caller = self.caller(context)
        return [c for c in checkpoints if self.may(caller, c.creator)]

    def creating(self, context: grpc.ServicerContext) -> str:
        """The creator a pipeline created by this call records."""
        return self.caller(context).identity

    def restoring(self, context: grpc.ServicerContext, name: str,
                  request: service_pb2.RestoreRequest) -> Claim:
        """Check that the caller may restore ``name`` from the request's source (the
        checkpoint's creator and the name's current one), and what the restore records."""
        caller = self.caller(context)
        current = self.creator_of(check_name(name))
        if current is not None and not self.may(caller, current):
            raise self._deny(caller, "restore", f"pipeline {name!r}")
        source = None
        if request.WhichOneof("source") == "checkpoint_id":
            stored = self._store.read_checkpoint(request.checkpoint_id, with_blob=False)
            if not self.may(caller, stored.creator):
                raise self._deny(caller, "restore from", f"checkpoint {stored.id!r}")
            source = stored.creator
        creator = current or source or caller.identity
        return Claim(creator, current or "")
