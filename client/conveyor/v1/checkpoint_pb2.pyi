from conveyor.v1 import pipeline_pb2 as _pipeline_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class OpBehaviour(_message.Message):
    __slots__ = ("key", "digest")
    KEY_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    key: str
    digest: bytes
    def __init__(self, key: _Optional[str] = ..., digest: _Optional[bytes] = ...) -> None: ...

class EngineId(_message.Message):
    __slots__ = ("decoder", "warp", "key_schedule", "output_version", "ops", "cpu", "gpu")
    DECODER_FIELD_NUMBER: _ClassVar[int]
    WARP_FIELD_NUMBER: _ClassVar[int]
    KEY_SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_VERSION_FIELD_NUMBER: _ClassVar[int]
    OPS_FIELD_NUMBER: _ClassVar[int]
    CPU_FIELD_NUMBER: _ClassVar[int]
    GPU_FIELD_NUMBER: _ClassVar[int]
    decoder: str
    warp: str
    key_schedule: int
    output_version: int
    ops: _containers.RepeatedCompositeFieldContainer[OpBehaviour]
    cpu: str
    gpu: str
    def __init__(self, decoder: _Optional[str] = ..., warp: _Optional[str] = ..., key_schedule: _Optional[int] = ..., output_version: _Optional[int] = ..., ops: _Optional[_Iterable[_Union[OpBehaviour, _Mapping]]] = ..., cpu: _Optional[str] = ..., gpu: _Optional[str] = ...) -> None: ...

class FileListDigest(_message.Message):
    __slots__ = ("op", "reader_name", "num_files", "sha256")
    OP_FIELD_NUMBER: _ClassVar[int]
    READER_NAME_FIELD_NUMBER: _ClassVar[int]
    NUM_FILES_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    op: int
    reader_name: str
    num_files: int
    sha256: bytes
    def __init__(self, op: _Optional[int] = ..., reader_name: _Optional[str] = ..., num_files: _Optional[int] = ..., sha256: _Optional[bytes] = ...) -> None: ...

class ReaderState(_message.Message):
    __slots__ = ("epoch", "position")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    position: int
    def __init__(self, epoch: _Optional[int] = ..., position: _Optional[int] = ...) -> None: ...

class RandomState(_message.Message):
    __slots__ = ("sample_index",)
    SAMPLE_INDEX_FIELD_NUMBER: _ClassVar[int]
    sample_index: int
    def __init__(self, sample_index: _Optional[int] = ...) -> None: ...

class ExternalSourceState(_message.Message):
    __slots__ = ("source", "epoch", "iteration")
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    ITERATION_FIELD_NUMBER: _ClassVar[int]
    source: str
    epoch: int
    iteration: int
    def __init__(self, source: _Optional[str] = ..., epoch: _Optional[int] = ..., iteration: _Optional[int] = ...) -> None: ...

class OpState(_message.Message):
    __slots__ = ("op", "reader", "random", "external_source")
    OP_FIELD_NUMBER: _ClassVar[int]
    READER_FIELD_NUMBER: _ClassVar[int]
    RANDOM_FIELD_NUMBER: _ClassVar[int]
    EXTERNAL_SOURCE_FIELD_NUMBER: _ClassVar[int]
    op: int
    reader: ReaderState
    random: RandomState
    external_source: ExternalSourceState
    def __init__(self, op: _Optional[int] = ..., reader: _Optional[_Union[ReaderState, _Mapping]] = ..., random: _Optional[_Union[RandomState, _Mapping]] = ..., external_source: _Optional[_Union[ExternalSourceState, _Mapping]] = ...) -> None: ...

class JobPosition(_message.Message):
    __slots__ = ("job", "rank", "world_size", "generation", "global_batches")
    JOB_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    WORLD_SIZE_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    GLOBAL_BATCHES_FIELD_NUMBER: _ClassVar[int]
    job: str
    rank: int
    world_size: int
    generation: int
    global_batches: int
    def __init__(self, job: _Optional[str] = ..., rank: _Optional[int] = ..., world_size: _Optional[int] = ..., generation: _Optional[int] = ..., global_batches: _Optional[int] = ...) -> None: ...

class CheckpointBody(_message.Message):
    __slots__ = ("format_version", "spec", "fingerprint", "file_lists", "engine", "op_states", "batches", "job")
    FORMAT_VERSION_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    FILE_LISTS_FIELD_NUMBER: _ClassVar[int]
    ENGINE_FIELD_NUMBER: _ClassVar[int]
    OP_STATES_FIELD_NUMBER: _ClassVar[int]
    BATCHES_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    format_version: int
    spec: _pipeline_pb2.PipelineSpec
    fingerprint: bytes
    file_lists: _containers.RepeatedCompositeFieldContainer[FileListDigest]
    engine: EngineId
    op_states: _containers.RepeatedCompositeFieldContainer[OpState]
    batches: int
    job: JobPosition
    def __init__(self, format_version: _Optional[int] = ..., spec: _Optional[_Union[_pipeline_pb2.PipelineSpec, _Mapping]] = ..., fingerprint: _Optional[bytes] = ..., file_lists: _Optional[_Iterable[_Union[FileListDigest, _Mapping]]] = ..., engine: _Optional[_Union[EngineId, _Mapping]] = ..., op_states: _Optional[_Iterable[_Union[OpState, _Mapping]]] = ..., batches: _Optional[int] = ..., job: _Optional[_Union[JobPosition, _Mapping]] = ...) -> None: ...

class SealedCheckpoint(_message.Message):
    __slots__ = ("format_version", "body", "sha256")
    FORMAT_VERSION_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    format_version: int
    body: bytes
    sha256: bytes
    def __init__(self, format_version: _Optional[int] = ..., body: _Optional[bytes] = ..., sha256: _Optional[bytes] = ...) -> None: ...
