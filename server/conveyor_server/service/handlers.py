"""The Conveyor servicer: one method per RPC of ``conveyor.v1.Conveyor``.

Each method is marked with its kind and registered from the descriptor
(``registration.py``); errors become status codes in ``status.py``; authentication and RPC
metrics are interceptors. Hosted pipelines live in ``hosted.py``, the stream in
``stream.py`` and checkpoint writing in ``checkpoints.py``. Each method first asks
``access.py`` whether the caller may act on the pipeline.
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

import grpc

from conveyor.definition import spec as specs
from conveyor.errors import (
    ConveyorError,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    SpecMismatch,
)
from conveyor.v1 import pipeline_pb2, service_pb2
from conveyor_server.engine.admission.limits import NO_LIMITS, EngineLimits
from conveyor_server.engine.data.object_store import ObjectStores
from conveyor_server.engine.data.object_urls import is_object_url
from conveyor_server.engine.identity import checkpoint as ckpt
from conveyor_server.engine.identity.behaviour.measure import Behaviour, process_behaviour
from conveyor_server.engine.pipeline import Pipeline
from conveyor_server.engine.stages.job_share import Share
from conveyor_server.engine.stages.source_callables import NONE_REGISTERED, ExternalSources
from conveyor_server.service import rpc_kinds
from conveyor_server.service.access import Access
from conveyor_server.service.checkpoints import CheckpointWriter
from conveyor_server.service.compute import ComputeCalls
from conveyor_server.service.describing import Descriptions
from conveyor_server.service.hosted import HostedPipeline, HostedPipelines
from conveyor_server.service.identity import Authenticator
from conveyor_server.service.jobs import Jobs, share_of
from conveyor_server.service.kill_points import NO_KILL_POINTS, KillPoints
from conveyor_server.service.listings import RedisListings
from conveyor_server.service.observer import ServiceObserver
from conveyor_server.service.stream import BatchStreams
from conveyor_server.service.stream_slots import StreamSlots
from conveyor_server.service.worker_pool import WorkerPool
from conveyor_server.store.fleet import Fleet, ServerRecord
from conveyor_server.store.ids import check_name
from conveyor_server.store.store import Store, StoredCheckpoint

log = logging.getLogger("conveyor.server")


def checkpoint_info(c: StoredCheckpoint) -> service_pb2.CheckpointInfo:
    return service_pb2.CheckpointInfo(
        id=c.id, pipeline=c.pipeline, batches=c.batches, created_unix_ms=c.created_ms,
        size_bytes=c.size, server=c.server, generation=c.generation, run_id=c.run_id)


def server_info(r: ServerRecord) -> service_pb2.ServerInfo:
    return service_pb2.ServerInfo(
        address=r.address, instance=r.instance, worker_threads=r.worker_threads,
        max_pipelines=r.max_pipelines, max_streams=r.max_streams, pipelines=r.pipelines,
        streams=r.streams, busy=r.busy, draining=r.draining,
        behaviour_digest=r.behaviour_digest, published_unix_ms=r.published_ms)


class ConveyorService:
    def __init__(self, store: Store, address: str, data_roots: Sequence[str | Path], *,
                 observer: ServiceObserver, keep_checkpoints: int = 10,
                 max_pipelines: int = 64, slots: StreamSlots | None = None,
                 drain_wait: float = 5.0,
                 limits: EngineLimits = NO_LIMITS, behaviour: Behaviour | None = None,
                 worker_threads: int = 0, kill_points: KillPoints = NO_KILL_POINTS,
                 external_sources: ExternalSources = NONE_REGISTERED,
                 objects: ObjectStores | None = None) -> None:
        self.store = store
        #: The callables a pipeline's external_source may name (the configuration's).
        self.external_sources = external_sources
        self.behaviour = behaviour or process_behaviour()
        self.listings = RedisListings(store)
        self.limits = limits
        self.address = address
        self.instance = uuid.uuid4().hex
        #: Folders (made Path) and object roots (``s3://``, ``gs://``, ``az://`` URLs, kept
        #: as given).
        self.data_roots: list[str | Path] = [r if is_object_url(str(r)) else Path(r)
                                             for r in data_roots]
        self.objects = objects
        self.keep_checkpoints = keep_checkpoints
        self.observer = observer
        self.pipelines = HostedPipelines(store, address, max_pipelines)
        self.descriptions = Descriptions(store, self.pipelines, address, self.instance)
        self.kill_points = kill_points
        self.jobs = Jobs(store, self.instance)
        self.checkpoints = CheckpointWriter(store, self.instance, address, observer,
                                            kill_points, self.jobs)
        self.streams = BatchStreams(self.pipelines, self.checkpoints, observer, address,
                                    drain_wait, slots or StreamSlots(64))
        # Every hosted pipeline computes on these workers: the server's compute threads
        # stay bounded however many pipelines and streams it serves, so streams cannot
        # crowd unary RPCs and health checks out of the interpreter.
        self.workers = WorkerPool(worker_threads or len(os.sched_getaffinity(0)),
                                  thread_name_prefix="conveyor-worker")
        #: The servers sharing this Redis, as they publish themselves (``fleet.py``).
        self.fleet = Fleet(store)
        observer.watch_hosted(self.pipelines.count)
        #: Who may do what; ``create_server`` gives it the configured authenticator.
        self.access = Access(Authenticator(), store, self.pipelines)
        self.streams.authorize = lambda context, name: self.access.require(
            context, name, "stream")
        #: Batches computed here for pipelines held elsewhere (fan-in, ``compute.py``).
        self.compute = ComputeCalls(store, self.access, lambda blob: self._build(None, blob),
                                    self.streams.slots, self.streams.draining, address, limits)

    def _build(self, spec: pipeline_pb2.PipelineSpec | None,
               blob: bytes | None = None, share: Share | None = None) -> Pipeline:
        return Pipeline(spec, checkpoint=blob, data_roots=self.data_roots, limits=self.limits,
                        behaviour=self.behaviour, listings=self.listings, pool=self.workers,
                        sources=self.external_sources, share=share, objects=self.objects)

    @rpc_kinds.unary
    def CreatePipeline(self, request: service_pb2.CreatePipelineRequest,
                       context: grpc.ServicerContext) -> service_pb2.CreatePipelineResponse:
        name = check_name(request.name)
        creator = self.access.creating(context)
        if not request.HasField("spec"):
            raise InvalidArgument("CreatePipeline needs a spec")
        share = share_of(name, request.job) if request.HasField("job") else None
        self.pipelines.check_capacity(name)
        engine = self._build(request.spec, share=share)
        keep = request.keep_checkpoints or self.keep_checkpoints
        claimed = time.monotonic()  # the lease runs from before the claim
        try:
            gen = self.store.create(name, self.address, self.instance,
                                    engine.fingerprint.hex(), keep, creator, request.run_id)
        except BaseException:
            engine.close()
            raise
        start = engine.start_batches
        hosted = HostedPipeline(name, engine, gen, keep, sent=start, acknowledged=start,
                                lease_until=claimed + self.store.lease)
        hosted.creator, hosted.run_id = creator, request.run_id
        self.pipelines.host(hosted)
        log.info("created pipeline %s (generation %d)", name, gen,
                 extra={"pipeline": name, "generation": gen})
        self._checkpoint_creation(hosted)
        return service_pb2.CreatePipelineResponse(pipeline=hosted.info(self.address))

    def _checkpoint_creation(self, hosted: HostedPipeline) -> None:
        """Record the new pipeline at its start (batch 0; a job's rank: its first step), so
        that until its trainer checkpoints, any server can still resume it at the trainer's
        position (restore is O(1) at any position): a client's failover needs no checkpoint
        of the trainer's own. The
        pipeline is created without it if Redis refuses it now."""
        if not hosted.engine.spec.enable_checkpointing:
            return
        try:
            self.checkpoints.write(hosted, hosted.engine.start_batches)
        except ConveyorError as exc:
            log.warning("pipeline %s has no creation checkpoint: %s (it cannot fail over "
                        "before its first checkpoint)", hosted.name, exc.message,
                        extra={"pipeline": hosted.name, "error": exc.message})

    @rpc_kinds.unary
    def DeletePipeline(self, request: service_pb2.DeletePipelineRequest,
                       context: grpc.ServicerContext) -> service_pb2.DeletePipelineResponse:
        self.access.require(context, request.name, "delete")
        if request.force and self.pipelines.get(check_name(request.name)) is None:
            # An operator's delete of a pipeline held elsewhere (its server gone): the
            # name is released whoever holds it, and a holder still alive is fenced.
            previous = self.store.release(request.name, self.instance,
                                          request.keep_checkpoints, force=True)
            log.warning("force-deleted pipeline %s held by %s", request.name, previous,
                        extra={"pipeline": request.name, "holder": previous})
            return service_pb2.DeletePipelineResponse()
        hosted = self.pipelines.get(check_name(request.name))
        if hosted is None:
            raise self.descriptions.not_deletable_here(request.name)
        with hosted.cond:
            mine, hosted.deleting = not hosted.deleting, True
        try:
            if hosted.ended is None:
                self.store.release(hosted.name, self.instance, request.keep_checkpoints,
                                   generation=hosted.generation)
        except BaseException:
            if mine:
                hosted.deleting = False
            raise
        self.pipelines.remove(hosted)
        hosted.end(f"pipeline {hosted.name!r} was deleted", NotFound)
        hosted.close()
        log.info("deleted pipeline %s (checkpoints %s)", hosted.name,
                 "kept" if request.keep_checkpoints else "deleted",
                 extra={"pipeline": hosted.name, "keep_checkpoints": request.keep_checkpoints})
        return service_pb2.DeletePipelineResponse()

    @rpc_kinds.unary
    def ListPipelines(self, request: service_pb2.ListPipelinesRequest,
                      context: grpc.ServicerContext) -> service_pb2.ListPipelinesResponse:
        caller = self.access.caller(context)
        names = self.store.names()
        # Another identity's are left out, and names whose owner is gone (deleted).
        owners = {name: owner for name, owner in self.store.owners(names).items()
                  if owner is not None and self.access.may(caller, owner.creator)}
        return service_pb2.ListPipelinesResponse(pipelines=self.descriptions.listed(owners))

    @rpc_kinds.unary
    def DescribePipeline(self, request: service_pb2.DescribePipelineRequest,
                         context: grpc.ServicerContext) -> service_pb2.DescribePipelineResponse:
        name = check_name(request.name)
        self.access.require(context, name, "describe")
        return service_pb2.DescribePipelineResponse(pipeline=self.descriptions.described(name))

    @rpc_kinds.bidi_streaming
    def StreamBatches(self, request_iterator: Iterator[service_pb2.StreamBatchesRequest],
                      context: grpc.ServicerContext) -> Iterator[bytes]:
        yield from self.streams.serve(request_iterator, context)

    @rpc_kinds.unary
    def Checkpoint(self, request: service_pb2.CheckpointRequest,
                   context: grpc.ServicerContext) -> service_pb2.CheckpointResponse:
        self.access.require(context, request.name, "checkpoint")
        hosted = self.pipelines.local(request.name)
        batches = request.consumed if request.HasField("consumed") else hosted.acknowledged
        if request.position_only:
            return service_pb2.CheckpointResponse(
                checkpoint=service_pb2.CheckpointInfo(
                    pipeline=hosted.name, batches=batches, server=self.address,
                    generation=hosted.generation, run_id=hosted.run_id),
                data=hosted.position(batches))
        produced = hosted.engine.batches_produced
        if batches > produced:
            raise FailedPrecondition(
                f"pipeline {hosted.name!r}: cannot checkpoint after {batches} consumed "
                f"batches: only {produced} were produced")
        stored = self.checkpoints.write_within(context, hosted, batches,
                                               past_epoch_end=request.past_epoch_end)
        return service_pb2.CheckpointResponse(checkpoint=checkpoint_info(stored),
                                              data=stored.blob)

    @rpc_kinds.bidi_streaming
    def ComputeBatches(self, request_iterator: Iterator[service_pb2.ComputeBatchesRequest],
                       context: grpc.ServicerContext) -> Iterator[bytes]:
        yield from self.compute.serve(request_iterator, context)

    @rpc_kinds.unary
    def Restore(self, request: service_pb2.RestoreRequest,
                context: grpc.ServicerContext) -> service_pb2.RestoreResponse:
        started = time.perf_counter()
        name = check_name(request.name)
        claim = self.access.restoring(context, name, request)
        source = request.WhichOneof("source")
        run_id = request.run_id
        if source == "checkpoint_id":
            stored = self.store.read_checkpoint(request.checkpoint_id)
            blob = stored.blob or b""
            if not request.HasField("run_id"):
                run_id = stored.run_id  # the run goes on
        elif source == "data":
            blob = request.data
        else:
            raise InvalidArgument("Restore needs a checkpoint_id or checkpoint data")
        if self.limits.spec is not None:
            self.limits.spec.check_checkpoint(blob)
        body = ckpt.open_blob(blob)
        share = share_of(name, request.job) if request.HasField("job") else None
        if share is None and body.HasField("job"):
            self.jobs.check_current(body.job)  # a rank's own checkpoint: its world still runs
        position = request.consumed if request.HasField("consumed") else body.batches
        if share is not None:
            position = share.step
        elif position < body.batches:
            raise InvalidArgument(f"Restore: consumed={position} is before the checkpoint's "
                                  f"position ({body.batches} batches); nothing was taken over")
        given = (specs.with_checkpoint_seed(request.spec, body.spec)
                 if request.HasField("spec") else None)  # a drawn seed takes the checkpoint's
        if given is not None:
            diff = specs.first_difference(body.spec, given, "checkpoint", "given spec")
            if diff is not None:
                raise SpecMismatch(f"checkpoint was made by a different pipeline: "
                                         f"{diff}")
        self.pipelines.check_capacity(name)
        engine = self._build(given, blob, share)
        if share is None and position != body.batches:
            engine.seek(position)
        keep = request.keep_checkpoints or self.keep_checkpoints
        claimed = time.monotonic()
        self.kill_points.reached("restore.before_claim")
        try:
            gen, previous = self.store.take_over(name, self.address, self.instance,
                                                 engine.fingerprint.hex(), keep,
                                                 claim.creator, claim.expect_creator, run_id)
        except BaseException:
            engine.close()
            raise
        self.kill_points.reached("restore.after_claim")
        hosted = HostedPipeline(name, engine, gen, keep, sent=position, acknowledged=position,
                                lease_until=claimed + self.store.lease)
        hosted.creator, hosted.run_id = claim.creator, run_id
        self.pipelines.host(hosted)
        self.observer.restored(time.perf_counter() - started)
        if share is not None:  # a rank's start: its own checkpoint to fail over from
            self._checkpoint_creation(hosted)
        fields: dict[str, object] = {"pipeline": name, "batches": position,
                                     "generation": gen}
        if source == "checkpoint_id":
            fields["checkpoint_id"] = request.checkpoint_id
        log.info("restored pipeline %s at batch %d from %s (generation %d, previous holder %s)",
                 name, position, fields.get("checkpoint_id", "checkpoint data"), gen,
                 previous or "none", extra=fields)
        return service_pb2.RestoreResponse(pipeline=hosted.info(self.address),
                                           batches=position)

    @rpc_kinds.unary
    def JoinJob(self, request: service_pb2.JoinJobRequest,
                context: grpc.ServicerContext) -> service_pb2.JoinJobResponse:
        caller = self.access.caller(context)
        return self.jobs.join(request, "" if caller.operator else caller.identity)

    @rpc_kinds.unary
    def ListServers(self, request: service_pb2.ListServersRequest,
                    context: grpc.ServicerContext) -> service_pb2.ListServersResponse:
        self.access.caller(context)  # any identity may see the fleet: it names no pipeline
        return service_pb2.ListServersResponse(
            servers=[server_info(r) for r in self.fleet.servers()])

    @rpc_kinds.unary
    def ListCheckpoints(self, request: service_pb2.ListCheckpointsRequest,
                        context: grpc.ServicerContext) -> service_pb2.ListCheckpointsResponse:
        name = check_name(request.name)
        self.access.require(context, name, "list the checkpoints of")
        found = self.access.visible(context, self.store.list_checkpoints(name))
        if not found and self.store.owner(name) is None:
            raise NotFound(f"pipeline {name!r} does not exist and has no checkpoints")
        return service_pb2.ListCheckpointsResponse(
            checkpoints=[checkpoint_info(c) for c in found])

    @rpc_kinds.unary
    def GetCheckpoint(self, request: service_pb2.GetCheckpointRequest,
                      context: grpc.ServicerContext) -> service_pb2.GetCheckpointResponse:
        stored = self.store.read_checkpoint(request.id)
        self.access.require_checkpoint(context, stored)
        ckpt.open_blob(stored.blob or b"")
        return service_pb2.GetCheckpointResponse(checkpoint=checkpoint_info(stored),
                                                 data=stored.blob)
