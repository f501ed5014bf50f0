"""``fn.external_source`` takes only sources a checkpoint can resume: a callable of the
position (or its ``"module:function"`` name); lists, iterators, generators and callables
that take no argument are refused when the pipeline is defined, with the reason."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from conveyor import fn, pipeline_def
from conveyor.errors import SpecError


def _generator_function() -> Iterator[int]:
    yield 1


def _no_argument() -> int:
    return 42


def _two_arguments(info: Any, other: Any) -> int:
    return 42


def _one_with_default(info: Any, scale: int = 2) -> int:
    return 42


def _var_args(*args: Any) -> int:
    return 42


def define(source: Any) -> Any:
    @pipeline_def(batch_size=2, enable_checkpointing=True)
    def pipeline() -> Any:
        return fn.external_source(source=source, batch=False)
    return pipeline()


@pytest.mark.parametrize(("source", "kind"), [
    ([1, 2, 3], "an iterable (list)"),
    (iter([1, 2, 3]), "an iterator (list_iterator)"),
    (_generator_function(), "an iterator (generator)"),
    (_generator_function, "a generator function"),
])
def test_a_source_that_is_not_a_callable_of_the_position_is_refused(source: Any,
                                                                    kind: str) -> None:
    with pytest.raises(SpecError) as caught:
        define(source)
    message = str(caught.value)
    assert message.startswith(f"external_source: argument 'source': got {kind}")
    assert "cannot be checkpointed" in message
    assert "callable of the position" in message


@pytest.mark.parametrize(("source", "takes"), [
    (_no_argument, "takes no argument"),
    (lambda: 0, "takes no argument"),
    (_two_arguments, "takes 2 required arguments"),
])
def test_a_callable_of_another_signature_is_refused_when_defined(source: Any,
                                                                 takes: str) -> None:
    with pytest.raises(SpecError, match=f"{takes}: it cannot be checkpointed"):
        define(source)


@pytest.mark.parametrize("source", [_one_with_default, _var_args, lambda info: 0,
                                    "tests.support.external_sources:samples"])
def test_a_callable_of_one_argument_or_a_name_is_taken(source: Any) -> None:
    assert define(source).spec.ops[0].type == "external_source"
