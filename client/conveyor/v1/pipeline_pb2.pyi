from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class IntList(_message.Message):
    __slots__ = ("values",)
    VALUES_FIELD_NUMBER: _ClassVar[int]
    values: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, values: _Optional[_Iterable[int]] = ...) -> None: ...

class FloatList(_message.Message):
    __slots__ = ("values",)
    VALUES_FIELD_NUMBER: _ClassVar[int]
    values: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, values: _Optional[_Iterable[float]] = ...) -> None: ...

class StringList(_message.Message):
    __slots__ = ("values",)
    VALUES_FIELD_NUMBER: _ClassVar[int]
    values: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, values: _Optional[_Iterable[str]] = ...) -> None: ...

class Argument(_message.Message):
    __slots__ = ("i", "f", "s", "b", "ints", "floats", "strings")
    I_FIELD_NUMBER: _ClassVar[int]
    F_FIELD_NUMBER: _ClassVar[int]
    S_FIELD_NUMBER: _ClassVar[int]
    B_FIELD_NUMBER: _ClassVar[int]
    INTS_FIELD_NUMBER: _ClassVar[int]
    FLOATS_FIELD_NUMBER: _ClassVar[int]
    STRINGS_FIELD_NUMBER: _ClassVar[int]
    i: int
    f: float
    s: str
    b: bool
    ints: IntList
    floats: FloatList
    strings: StringList
    def __init__(self, i: _Optional[int] = ..., f: _Optional[float] = ..., s: _Optional[str] = ..., b: _Optional[bool] = ..., ints: _Optional[_Union[IntList, _Mapping]] = ..., floats: _Optional[_Union[FloatList, _Mapping]] = ..., strings: _Optional[_Union[StringList, _Mapping]] = ...) -> None: ...

class OutputRef(_message.Message):
    __slots__ = ("op", "output")
    OP_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    op: int
    output: int
    def __init__(self, op: _Optional[int] = ..., output: _Optional[int] = ...) -> None: ...

class OpSpec(_message.Message):
    __slots__ = ("type", "name", "device", "inputs", "args", "arg_inputs", "num_outputs")
    class ArgsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: Argument
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[Argument, _Mapping]] = ...) -> None: ...
    class ArgInputsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: OutputRef
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[OutputRef, _Mapping]] = ...) -> None: ...
    TYPE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    INPUTS_FIELD_NUMBER: _ClassVar[int]
    ARGS_FIELD_NUMBER: _ClassVar[int]
    ARG_INPUTS_FIELD_NUMBER: _ClassVar[int]
    NUM_OUTPUTS_FIELD_NUMBER: _ClassVar[int]
    type: str
    name: str
    device: str
    inputs: _containers.RepeatedCompositeFieldContainer[OutputRef]
    args: _containers.MessageMap[str, Argument]
    arg_inputs: _containers.MessageMap[str, OutputRef]
    num_outputs: int
    def __init__(self, type: _Optional[str] = ..., name: _Optional[str] = ..., device: _Optional[str] = ..., inputs: _Optional[_Iterable[_Union[OutputRef, _Mapping]]] = ..., args: _Optional[_Mapping[str, Argument]] = ..., arg_inputs: _Optional[_Mapping[str, OutputRef]] = ..., num_outputs: _Optional[int] = ...) -> None: ...

class PipelineSpec(_message.Message):
    __slots__ = ("spec_version", "batch_size", "num_threads", "seed", "enable_checkpointing", "prefetch_queue_depth", "device_id", "ops", "outputs", "definition", "seed_drawn", "py_num_workers", "py_start_method")
    SPEC_VERSION_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    NUM_THREADS_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    ENABLE_CHECKPOINTING_FIELD_NUMBER: _ClassVar[int]
    PREFETCH_QUEUE_DEPTH_FIELD_NUMBER: _ClassVar[int]
    DEVICE_ID_FIELD_NUMBER: _ClassVar[int]
    OPS_FIELD_NUMBER: _ClassVar[int]
    OUTPUTS_FIELD_NUMBER: _ClassVar[int]
    DEFINITION_FIELD_NUMBER: _ClassVar[int]
    SEED_DRAWN_FIELD_NUMBER: _ClassVar[int]
    PY_NUM_WORKERS_FIELD_NUMBER: _ClassVar[int]
    PY_START_METHOD_FIELD_NUMBER: _ClassVar[int]
    spec_version: int
    batch_size: int
    num_threads: int
    seed: int
    enable_checkpointing: bool
    prefetch_queue_depth: int
    device_id: int
    ops: _containers.RepeatedCompositeFieldContainer[OpSpec]
    outputs: _containers.RepeatedCompositeFieldContainer[OutputRef]
    definition: str
    seed_drawn: bool
    py_num_workers: int
    py_start_method: str
    def __init__(self, spec_version: _Optional[int] = ..., batch_size: _Optional[int] = ..., num_threads: _Optional[int] = ..., seed: _Optional[int] = ..., enable_checkpointing: _Optional[bool] = ..., prefetch_queue_depth: _Optional[int] = ..., device_id: _Optional[int] = ..., ops: _Optional[_Iterable[_Union[OpSpec, _Mapping]]] = ..., outputs: _Optional[_Iterable[_Union[OutputRef, _Mapping]]] = ..., definition: _Optional[str] = ..., seed_drawn: _Optional[bool] = ..., py_num_workers: _Optional[int] = ..., py_start_method: _Optional[str] = ...) -> None: ...
