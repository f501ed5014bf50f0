"""What ListPipelines and DescribePipeline say of a pipeline: ``Descriptions``.

Whoever holds it, the answer carries what Redis has: whether the holder is alive (its
instance still holds the name's lease) and the newest checkpoint, whichever server wrote
it (after a failover the new holder has written none yet, but the pipeline has one). A
pipeline this server holds adds its spec and live counters; one held by another server, on
describe, the spec of its newest checkpoint (of the same fingerprint), so an operator sees
what it computes even when its holder is gone.
"""

from __future__ import annotations

from conveyor.errors import ConveyorError, FailedPrecondition, NotFound, Unavailable
from conveyor.v1 import service_pb2
from conveyor_server.engine.identity import checkpoint as ckpt
from conveyor_server.service.hosted import HostedPipeline, HostedPipelines
from conveyor_server.store.records import Owner
from conveyor_server.store.store import Store


def held_elsewhere(name: str, owner: Owner, alive: bool) -> service_pb2.PipelineInfo:
    """What Redis knows of a pipeline this server does not host."""
    return service_pb2.PipelineInfo(
        name=name, holder=owner.holder, generation=owner.generation,
        fingerprint=owner.fingerprint, latest_checkpoint=owner.latest_id,
        run_id=owner.run_id, holder_alive=alive)


class Descriptions:
    def __init__(self, store: Store, pipelines: HostedPipelines, address: str,
                 instance: str) -> None:
        self._store = store
        self._pipelines = pipelines
        self._address = address
        self._instance = instance

    def listed(self, owners: dict[str, Owner]) -> list[service_pb2.PipelineInfo]:
        """The pipelines of ``owners`` (by name, in order), without their specs."""
        names = list(owners)
        leases = self._store.lease_holders(names) if names else {}
        local = {h.name: h for h in self._pipelines.all()}
        out = []
        for name, owner in owners.items():
            alive = bool(owner.instance) and leases.get(name) == owner.instance
            hosted = local.get(name)
            if hosted is not None and owner.instance == self._instance:
                out.append(self._hosted(hosted, owner, alive, include_spec=False))
            else:
                out.append(held_elsewhere(name, owner, alive))
        return out

    def described(self, name: str) -> service_pb2.PipelineInfo:
        """One pipeline; NotFound if no server holds it. A pipeline hosted here is still
        described, from what this server knows, while Redis cannot be read."""
        hosted = self._pipelines.get(name)
        live = hosted if hosted is not None and hosted.ended is None else None
        try:
            owner = self._store.owner(name)
            alive = owner is not None and bool(owner.instance) and \
                self._store.lease_holders([name])[name] == owner.instance
        except Unavailable:
            if live is None:
                raise
            return live.info(self._address)
        if owner is None:
            if live is not None:  # deleted through another server: not yet seen here
                return live.info(self._address)
            raise NotFound(f"pipeline {name!r} does not exist: `conveyor pipelines` lists "
                           "the pipelines there are; a trainer's open creates it")
        if live is not None and owner.instance == self._instance:
            return self._hosted(live, owner, alive, include_spec=True)
        info = held_elsewhere(name, owner, alive)
        self._add_checkpoint_spec(info, owner)
        return info

    def not_deletable_here(self, name: str) -> ConveyorError:
        """Why this server cannot delete ``name``, which it does not host, and what to do:
        NotFound, or FailedPrecondition naming the holder (in ``holder``), alive or not."""
        owner = self._store.owner(name)
        if owner is None:
            return NotFound(f"pipeline {name!r} does not exist: `conveyor pipelines` lists "
                            "the pipelines there are")
        alive = self._store.lease_holders([name])[name] == owner.instance
        force = (f"force the delete here (`conveyor delete {name} --force`, "
                 "DeletePipelineRequest.force)")
        if alive:
            return FailedPrecondition(
                f"pipeline {name!r} is held by server {owner.holder} (alive), not by this "
                f"one ({self._address}): delete it through that server (`conveyor --server "
                f"{owner.holder} delete {name}`), or {force}, which fences that server",
                holder=owner.holder)
        return FailedPrecondition(
            f"pipeline {name!r} is held by server {owner.holder}, whose lease ran out (the "
            f"server is gone), not by this one ({self._address}): {force}, or resume it "
            f"on a live server (`conveyor restore {name} --checkpoint ID`, or a trainer's "
            "open)", holder=owner.holder)

    def _hosted(self, hosted: HostedPipeline, owner: Owner, alive: bool,
                include_spec: bool) -> service_pb2.PipelineInfo:
        info = hosted.info(self._address, include_spec=include_spec)
        info.latest_checkpoint = owner.latest_id or hosted.latest_checkpoint
        info.holder_alive = alive
        return info

    def _add_checkpoint_spec(self, info: service_pb2.PipelineInfo, owner: Owner) -> None:
        """The spec of the pipeline's newest checkpoint, if it has one of its fingerprint
        that can be read (else none: describe still answers)."""
        if not owner.latest_id:
            return
        try:
            stored = self._store.read_checkpoint(owner.latest_id)
            body = ckpt.open_blob(stored.blob or b"")
        except ConveyorError:
            return
        if body.fingerprint.hex() == owner.fingerprint:
            info.spec.CopyFrom(body.spec)
            info.spec_checkpoint = owner.latest_id
