from conveyor.v1 import pipeline_pb2 as _pipeline_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class JobShare(_message.Message):
    __slots__ = ("job", "rank", "world_size", "generation", "step", "global_batches")
    JOB_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    WORLD_SIZE_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    GLOBAL_BATCHES_FIELD_NUMBER: _ClassVar[int]
    job: str
    rank: int
    world_size: int
    generation: int
    step: int
    global_batches: int
    def __init__(self, job: _Optional[str] = ..., rank: _Optional[int] = ..., world_size: _Optional[int] = ..., generation: _Optional[int] = ..., step: _Optional[int] = ..., global_batches: _Optional[int] = ...) -> None: ...

class PipelineInfo(_message.Message):
    __slots__ = ("name", "holder", "generation", "fingerprint", "spec", "produced", "sent", "acknowledged", "streaming", "latest_checkpoint", "epoch_sizes", "samples_skipped", "samples_replaced", "run_id", "job", "holder_alive", "spec_checkpoint", "idle_s")
    class EpochSizesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    HOLDER_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    PRODUCED_FIELD_NUMBER: _ClassVar[int]
    SENT_FIELD_NUMBER: _ClassVar[int]
    ACKNOWLEDGED_FIELD_NUMBER: _ClassVar[int]
    STREAMING_FIELD_NUMBER: _ClassVar[int]
    LATEST_CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    EPOCH_SIZES_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_SKIPPED_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_REPLACED_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    HOLDER_ALIVE_FIELD_NUMBER: _ClassVar[int]
    SPEC_CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    IDLE_S_FIELD_NUMBER: _ClassVar[int]
    name: str
    holder: str
    generation: int
    fingerprint: str
    spec: _pipeline_pb2.PipelineSpec
    produced: int
    sent: int
    acknowledged: int
    streaming: bool
    latest_checkpoint: str
    epoch_sizes: _containers.ScalarMap[str, int]
    samples_skipped: int
    samples_replaced: int
    run_id: str
    job: JobShare
    holder_alive: bool
    spec_checkpoint: str
    idle_s: float
    def __init__(self, name: _Optional[str] = ..., holder: _Optional[str] = ..., generation: _Optional[int] = ..., fingerprint: _Optional[str] = ..., spec: _Optional[_Union[_pipeline_pb2.PipelineSpec, _Mapping]] = ..., produced: _Optional[int] = ..., sent: _Optional[int] = ..., acknowledged: _Optional[int] = ..., streaming: _Optional[bool] = ..., latest_checkpoint: _Optional[str] = ..., epoch_sizes: _Optional[_Mapping[str, int]] = ..., samples_skipped: _Optional[int] = ..., samples_replaced: _Optional[int] = ..., run_id: _Optional[str] = ..., job: _Optional[_Union[JobShare, _Mapping]] = ..., holder_alive: _Optional[bool] = ..., spec_checkpoint: _Optional[str] = ..., idle_s: _Optional[float] = ...) -> None: ...

class CreatePipelineRequest(_message.Message):
    __slots__ = ("name", "spec", "keep_checkpoints", "run_id", "job")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    KEEP_CHECKPOINTS_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    name: str
    spec: _pipeline_pb2.PipelineSpec
    keep_checkpoints: int
    run_id: str
    job: JobShare
    def __init__(self, name: _Optional[str] = ..., spec: _Optional[_Union[_pipeline_pb2.PipelineSpec, _Mapping]] = ..., keep_checkpoints: _Optional[int] = ..., run_id: _Optional[str] = ..., job: _Optional[_Union[JobShare, _Mapping]] = ...) -> None: ...

class CreatePipelineResponse(_message.Message):
    __slots__ = ("pipeline",)
    PIPELINE_FIELD_NUMBER: _ClassVar[int]
    pipeline: PipelineInfo
    def __init__(self, pipeline: _Optional[_Union[PipelineInfo, _Mapping]] = ...) -> None: ...

class DeletePipelineRequest(_message.Message):
    __slots__ = ("name", "keep_checkpoints", "force")
    NAME_FIELD_NUMBER: _ClassVar[int]
    KEEP_CHECKPOINTS_FIELD_NUMBER: _ClassVar[int]
    FORCE_FIELD_NUMBER: _ClassVar[int]
    name: str
    keep_checkpoints: bool
    force: bool
    def __init__(self, name: _Optional[str] = ..., keep_checkpoints: _Optional[bool] = ..., force: _Optional[bool] = ...) -> None: ...

class DeletePipelineResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListPipelinesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListPipelinesResponse(_message.Message):
    __slots__ = ("pipelines",)
    PIPELINES_FIELD_NUMBER: _ClassVar[int]
    pipelines: _containers.RepeatedCompositeFieldContainer[PipelineInfo]
    def __init__(self, pipelines: _Optional[_Iterable[_Union[PipelineInfo, _Mapping]]] = ...) -> None: ...

class DescribePipelineRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class DescribePipelineResponse(_message.Message):
    __slots__ = ("pipeline",)
    PIPELINE_FIELD_NUMBER: _ClassVar[int]
    pipeline: PipelineInfo
    def __init__(self, pipeline: _Optional[_Union[PipelineInfo, _Mapping]] = ...) -> None: ...

class StreamBatchesRequest(_message.Message):
    __slots__ = ("name", "consumed", "data_channel")
    NAME_FIELD_NUMBER: _ClassVar[int]
    CONSUMED_FIELD_NUMBER: _ClassVar[int]
    DATA_CHANNEL_FIELD_NUMBER: _ClassVar[int]
    name: str
    consumed: int
    data_channel: bool
    def __init__(self, name: _Optional[str] = ..., consumed: _Optional[int] = ..., data_channel: _Optional[bool] = ...) -> None: ...

class TensorHeader(_message.Message):
    __slots__ = ("dtype", "layout", "ndim", "shapes")
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    LAYOUT_FIELD_NUMBER: _ClassVar[int]
    NDIM_FIELD_NUMBER: _ClassVar[int]
    SHAPES_FIELD_NUMBER: _ClassVar[int]
    dtype: str
    layout: str
    ndim: int
    shapes: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, dtype: _Optional[str] = ..., layout: _Optional[str] = ..., ndim: _Optional[int] = ..., shapes: _Optional[_Iterable[int]] = ...) -> None: ...

class BatchHeader(_message.Message):
    __slots__ = ("index", "batch_size", "outputs", "total_bytes", "opens_source_epoch")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    OUTPUTS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    OPENS_SOURCE_EPOCH_FIELD_NUMBER: _ClassVar[int]
    index: int
    batch_size: int
    outputs: _containers.RepeatedCompositeFieldContainer[TensorHeader]
    total_bytes: int
    opens_source_epoch: bool
    def __init__(self, index: _Optional[int] = ..., batch_size: _Optional[int] = ..., outputs: _Optional[_Iterable[_Union[TensorHeader, _Mapping]]] = ..., total_bytes: _Optional[int] = ..., opens_source_epoch: _Optional[bool] = ...) -> None: ...

class StreamBatchesResponse(_message.Message):
    __slots__ = ("header", "data", "offer")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    OFFER_FIELD_NUMBER: _ClassVar[int]
    header: BatchHeader
    data: bytes
    offer: DataChannelOffer
    def __init__(self, header: _Optional[_Union[BatchHeader, _Mapping]] = ..., data: _Optional[bytes] = ..., offer: _Optional[_Union[DataChannelOffer, _Mapping]] = ...) -> None: ...

class DataChannelOffer(_message.Message):
    __slots__ = ("ticket", "port", "expires_ms")
    TICKET_FIELD_NUMBER: _ClassVar[int]
    PORT_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_MS_FIELD_NUMBER: _ClassVar[int]
    ticket: bytes
    port: int
    expires_ms: int
    def __init__(self, ticket: _Optional[bytes] = ..., port: _Optional[int] = ..., expires_ms: _Optional[int] = ...) -> None: ...

class CheckpointRequest(_message.Message):
    __slots__ = ("name", "consumed", "position_only", "past_epoch_end")
    NAME_FIELD_NUMBER: _ClassVar[int]
    CONSUMED_FIELD_NUMBER: _ClassVar[int]
    POSITION_ONLY_FIELD_NUMBER: _ClassVar[int]
    PAST_EPOCH_END_FIELD_NUMBER: _ClassVar[int]
    name: str
    consumed: int
    position_only: bool
    past_epoch_end: bool
    def __init__(self, name: _Optional[str] = ..., consumed: _Optional[int] = ..., position_only: _Optional[bool] = ..., past_epoch_end: _Optional[bool] = ...) -> None: ...

class CheckpointResponse(_message.Message):
    __slots__ = ("checkpoint", "data")
    CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    checkpoint: CheckpointInfo
    data: bytes
    def __init__(self, checkpoint: _Optional[_Union[CheckpointInfo, _Mapping]] = ..., data: _Optional[bytes] = ...) -> None: ...

class CheckpointInfo(_message.Message):
    __slots__ = ("id", "pipeline", "batches", "created_unix_ms", "size_bytes", "server", "generation", "run_id")
    ID_FIELD_NUMBER: _ClassVar[int]
    PIPELINE_FIELD_NUMBER: _ClassVar[int]
    BATCHES_FIELD_NUMBER: _ClassVar[int]
    CREATED_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    SERVER_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    pipeline: str
    batches: int
    created_unix_ms: int
    size_bytes: int
    server: str
    generation: int
    run_id: str
    def __init__(self, id: _Optional[str] = ..., pipeline: _Optional[str] = ..., batches: _Optional[int] = ..., created_unix_ms: _Optional[int] = ..., size_bytes: _Optional[int] = ..., server: _Optional[str] = ..., generation: _Optional[int] = ..., run_id: _Optional[str] = ...) -> None: ...

class RestoreRequest(_message.Message):
    __slots__ = ("name", "checkpoint_id", "data", "spec", "keep_checkpoints", "consumed", "run_id", "job")
    NAME_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    KEEP_CHECKPOINTS_FIELD_NUMBER: _ClassVar[int]
    CONSUMED_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    name: str
    checkpoint_id: str
    data: bytes
    spec: _pipeline_pb2.PipelineSpec
    keep_checkpoints: int
    consumed: int
    run_id: str
    job: JobShare
    def __init__(self, name: _Optional[str] = ..., checkpoint_id: _Optional[str] = ..., data: _Optional[bytes] = ..., spec: _Optional[_Union[_pipeline_pb2.PipelineSpec, _Mapping]] = ..., keep_checkpoints: _Optional[int] = ..., consumed: _Optional[int] = ..., run_id: _Optional[str] = ..., job: _Optional[_Union[JobShare, _Mapping]] = ...) -> None: ...

class RestoreResponse(_message.Message):
    __slots__ = ("pipeline", "batches")
    PIPELINE_FIELD_NUMBER: _ClassVar[int]
    BATCHES_FIELD_NUMBER: _ClassVar[int]
    pipeline: PipelineInfo
    batches: int
    def __init__(self, pipeline: _Optional[_Union[PipelineInfo, _Mapping]] = ..., batches: _Optional[int] = ...) -> None: ...

class ListCheckpointsRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class ListCheckpointsResponse(_message.Message):
    __slots__ = ("checkpoints",)
    CHECKPOINTS_FIELD_NUMBER: _ClassVar[int]
    checkpoints: _containers.RepeatedCompositeFieldContainer[CheckpointInfo]
    def __init__(self, checkpoints: _Optional[_Iterable[_Union[CheckpointInfo, _Mapping]]] = ...) -> None: ...

class GetCheckpointRequest(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class GetCheckpointResponse(_message.Message):
    __slots__ = ("checkpoint", "data")
    CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    checkpoint: CheckpointInfo
    data: bytes
    def __init__(self, checkpoint: _Optional[_Union[CheckpointInfo, _Mapping]] = ..., data: _Optional[bytes] = ...) -> None: ...

class JoinJobRequest(_message.Message):
    __slots__ = ("job", "world_size", "run_id", "fingerprint", "step", "existing_only")
    JOB_FIELD_NUMBER: _ClassVar[int]
    WORLD_SIZE_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    EXISTING_ONLY_FIELD_NUMBER: _ClassVar[int]
    job: str
    world_size: int
    run_id: str
    fingerprint: str
    step: int
    existing_only: bool
    def __init__(self, job: _Optional[str] = ..., world_size: _Optional[int] = ..., run_id: _Optional[str] = ..., fingerprint: _Optional[str] = ..., step: _Optional[int] = ..., existing_only: _Optional[bool] = ...) -> None: ...

class JoinJobResponse(_message.Message):
    __slots__ = ("generation", "run_id", "world_size", "step", "global_batches", "checkpoint_id", "cut_step", "cut_global_batches")
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    WORLD_SIZE_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    GLOBAL_BATCHES_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    CUT_STEP_FIELD_NUMBER: _ClassVar[int]
    CUT_GLOBAL_BATCHES_FIELD_NUMBER: _ClassVar[int]
    generation: int
    run_id: str
    world_size: int
    step: int
    global_batches: int
    checkpoint_id: str
    cut_step: int
    cut_global_batches: int
    def __init__(self, generation: _Optional[int] = ..., run_id: _Optional[str] = ..., world_size: _Optional[int] = ..., step: _Optional[int] = ..., global_batches: _Optional[int] = ..., checkpoint_id: _Optional[str] = ..., cut_step: _Optional[int] = ..., cut_global_batches: _Optional[int] = ...) -> None: ...

class ServerInfo(_message.Message):
    __slots__ = ("address", "instance", "worker_threads", "max_pipelines", "max_streams", "pipelines", "streams", "busy", "draining", "behaviour_digest", "published_unix_ms")
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_FIELD_NUMBER: _ClassVar[int]
    WORKER_THREADS_FIELD_NUMBER: _ClassVar[int]
    MAX_PIPELINES_FIELD_NUMBER: _ClassVar[int]
    MAX_STREAMS_FIELD_NUMBER: _ClassVar[int]
    PIPELINES_FIELD_NUMBER: _ClassVar[int]
    STREAMS_FIELD_NUMBER: _ClassVar[int]
    BUSY_FIELD_NUMBER: _ClassVar[int]
    DRAINING_FIELD_NUMBER: _ClassVar[int]
    BEHAVIOUR_DIGEST_FIELD_NUMBER: _ClassVar[int]
    PUBLISHED_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    address: str
    instance: str
    worker_threads: int
    max_pipelines: int
    max_streams: int
    pipelines: int
    streams: int
    busy: float
    draining: bool
    behaviour_digest: str
    published_unix_ms: int
    def __init__(self, address: _Optional[str] = ..., instance: _Optional[str] = ..., worker_threads: _Optional[int] = ..., max_pipelines: _Optional[int] = ..., max_streams: _Optional[int] = ..., pipelines: _Optional[int] = ..., streams: _Optional[int] = ..., busy: _Optional[float] = ..., draining: _Optional[bool] = ..., behaviour_digest: _Optional[str] = ..., published_unix_ms: _Optional[int] = ...) -> None: ...

class ListServersRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListServersResponse(_message.Message):
    __slots__ = ("servers",)
    SERVERS_FIELD_NUMBER: _ClassVar[int]
    servers: _containers.RepeatedCompositeFieldContainer[ServerInfo]
    def __init__(self, servers: _Optional[_Iterable[_Union[ServerInfo, _Mapping]]] = ...) -> None: ...

class ComputeStart(_message.Message):
    __slots__ = ("name", "checkpoint", "data_channel")
    NAME_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    DATA_CHANNEL_FIELD_NUMBER: _ClassVar[int]
    name: str
    checkpoint: bytes
    data_channel: bool
    def __init__(self, name: _Optional[str] = ..., checkpoint: _Optional[bytes] = ..., data_channel: _Optional[bool] = ...) -> None: ...

class ComputeRange(_message.Message):
    __slots__ = ("first", "count")
    FIRST_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    first: int
    count: int
    def __init__(self, first: _Optional[int] = ..., count: _Optional[int] = ...) -> None: ...

class ComputeBatchesRequest(_message.Message):
    __slots__ = ("start", "compute", "cancel")
    START_FIELD_NUMBER: _ClassVar[int]
    COMPUTE_FIELD_NUMBER: _ClassVar[int]
    CANCEL_FIELD_NUMBER: _ClassVar[int]
    start: ComputeStart
    compute: ComputeRange
    cancel: int
    def __init__(self, start: _Optional[_Union[ComputeStart, _Mapping]] = ..., compute: _Optional[_Union[ComputeRange, _Mapping]] = ..., cancel: _Optional[int] = ...) -> None: ...

class ComputeBatchesResponse(_message.Message):
    __slots__ = ("header", "data", "offer")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    OFFER_FIELD_NUMBER: _ClassVar[int]
    header: BatchHeader
    data: bytes
    offer: DataChannelOffer
    def __init__(self, header: _Optional[_Union[BatchHeader, _Mapping]] = ..., data: _Optional[bytes] = ..., offer: _Optional[_Union[DataChannelOffer, _Mapping]] = ...) -> None: ...
