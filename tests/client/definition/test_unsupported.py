"""What a DALI script uses and Conveyor does not have is one clear error at definition time:
``NotSupported`` says "... is not supported by Conveyor", offers the close names (or what
is supported) and the page listing it. It is an ``AttributeError`` too, so ``hasattr`` and
DALI-style feature probing see the name as absent rather than breaking."""

from __future__ import annotations

from typing import Any

import pytest

import conveyor
from conveyor.dali import fn, pipeline_def, types
from conveyor.definition.schemas import registry as schema
from conveyor.errors import InvalidArgument, NotSupported, SpecError
from conveyor.v1 import pipeline_pb2

OPERATORS = "see docs/reference/operators.md"
PORTING = "see docs/porting-from-dali.md"


@pytest.mark.parametrize(("probe", "message"), [
    (lambda: fn.rotatte, r"fn\.rotatte is not supported by Conveyor \(did you mean fn\.rotate\?\)"),
    (lambda: fn.jitter, r"fn\.jitter is not supported by Conveyor \(supported: "
                        r"fn\..*, fn\.readers, .*fn\.rotate, .*\)"),
    (lambda: fn.readers.video, r"fn\.readers\.video is not supported by Conveyor "
                               r"\(supported: fn\.readers\.caffe, fn\.readers\.caffe2, "
                               r".*fn\.readers\.file, .*fn\.readers\.webdataset\)"),
    (lambda: fn.readers.fil, r"\(did you mean fn\.readers\.file\?\)"),
    (lambda: fn.decoders.imag, r"did you mean fn\.decoders\.image"),
    (lambda: fn.math.sqr, r"fn\.math\.sqr is not supported by Conveyor \(did you mean "
                          r"fn\.math\.sqrt\?\)"),
    (lambda: fn.random.beta, r"fn\.random\.beta is not supported .*supported: "
                             r"fn\.random\.choice, fn\.random\.coin_flip"),
    (lambda: fn.experimental.decoders, r"fn\.experimental\.decoders is not supported"),
    (lambda: conveyor.fn.noise, r"fn\.noise is not supported by Conveyor"),
])
def test_an_unknown_operator_names_what_is_close_and_the_reference(probe: Any,
                                                                   message: str) -> None:
    with pytest.raises(NotSupported, match=message) as caught:
        probe()
    assert caught.value.message.endswith(OPERATORS)
    assert isinstance(caught.value, AttributeError) and isinstance(caught.value, SpecError)
    assert caught.value.reason == "NOT_SUPPORTED"


def test_hasattr_and_feature_probing_see_absent_names() -> None:
    assert hasattr(fn, "rotate") and hasattr(fn.readers, "file") and hasattr(fn.math, "sqrt")
    assert not hasattr(fn, "jitter") and not hasattr(fn.readers, "video")
    assert not hasattr(types, "INTERP_GAUSSIAN") and hasattr(types, "INTERP_TRIANGULAR")
    assert getattr(fn.readers, "video", None) is None
    assert getattr(types, "YCbCr", "absent") == "absent"
    # Private and dunder probes (copy, pickle, inspect) stay plain AttributeErrors.
    with pytest.raises(AttributeError) as caught:
        _ = fn.readers.__wrapped__
    assert not isinstance(caught.value, NotSupported)
    assert "file" in dir(fn.readers) and "video" not in dir(fn.readers)


def test_an_unknown_argument_names_the_close_arguments() -> None:
    @pipeline_def(batch_size=2, seed=1)
    def misspelt() -> Any:
        jpegs, _ = fn.readers.file(file_root="/data", random_shufle=True)
        return jpegs

    with pytest.raises(NotSupported, match=r"readers\.file: argument 'random_shufle': "
                       r"fn\.readers\.file's argument 'random_shufle' is not supported by "
                       r"Conveyor \(did you mean 'random_shuffle'\?\)") as caught:
        misspelt()
    assert (caught.value.op, caught.value.argument) == ("readers.file", "random_shufle")
    assert caught.value.message.endswith(OPERATORS)

    @pipeline_def(batch_size=2, seed=1)
    def dali_hint(root: str) -> Any:
        jpegs, _ = fn.readers.file(file_root=root)
        return fn.decoders.image_random_crop(jpegs, device_memory_padding=211025920)

    with pytest.raises(NotSupported, match=r"'device_memory_padding' is not supported by "
                       r"Conveyor \(supported: 'hw_decoder_load', 'num_attempts', "):
        dali_hint("/data")


def test_a_spec_with_an_unknown_argument_is_refused_as_not_supported() -> None:
    """The server validates specs with the same schemas: the same error, from any client."""
    op = pipeline_pb2.OpSpec(type="rotate")
    op.args["angle"].f = 10.0
    op.args["fill_valu"].f = 0.0
    with pytest.raises(NotSupported, match="did you mean 'fill_value'"):
        schema.decode_args(op)
    op.type = "warp"
    with pytest.raises(NotSupported, match="warp: unknown operator: fn.warp is not supported"):
        schema.decode_args(op)


def test_dali_pipeline_arguments_conveyor_lacks_are_refused_at_definition() -> None:
    with pytest.raises(NotSupported, match=r"pipeline_def: DALI's pipeline argument "
                       r"'max_streams' is not supported by Conveyor \(supported: "
                       r"'batch_size', ") as caught:
        pipeline_def(batch_size=2, max_streams=4)
    assert caught.value.message.endswith(PORTING)
    with pytest.raises(NotSupported, match=r"unknown pipeline argument 'num_thread' .*did "
                       r"you mean 'num_threads'"):
        pipeline_def(batch_size=2, num_thread=2)

    @pipeline_def(batch_size=2, seed=1)
    def plain() -> Any:
        return fn.random.uniform()

    with pytest.raises(NotSupported, match="'enable_memory_stats' is not supported"):
        plain(enable_memory_stats=True)

    @pipeline_def(batch_size=2, seed=1)
    def takes_its_own(stream: int = 0) -> Any:
        return fn.random.uniform(range=(0.0, float(stream + 1)))

    assert takes_its_own(stream=3).spec.batch_size == 2  # the function's own parameter
    with pytest.raises(InvalidArgument, match="unknown pipeline argument"):
        conveyor.pipeline_def(batch_size=2, exec_asinc=False)


def test_unknown_types_name_the_close_constants() -> None:
    with pytest.raises(NotSupported, match=r"types: the constant types\.INTERP_GAUSSIAN is "
                       r"not supported by Conveyor \(did you mean types\.INTERP_") as c:
        _ = types.INTERP_GAUSSIAN
    assert c.value.message.endswith(PORTING)
    with pytest.raises(NotSupported, match=r"types\.FLOAT32 .*did you mean types\.FLOAT"):
        _ = conveyor.types.FLOAT32
    assert types.FLOAT == "float32"
