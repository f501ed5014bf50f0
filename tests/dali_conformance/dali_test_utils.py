"""What DALI's test utilities (``test_utils``, ``nose_utils``, nose2's ``params``) give the
test files ported here, written for pytest."""

from __future__ import annotations

import fnmatch
import itertools
import re
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest


def _case_id(case: tuple[Any, ...]) -> str:
    return "-".join(str(v) for v in case)


def params(*cases: Any) -> Callable[[Callable[..., None]], Any]:
    """nose2's ``params``: one test per case, a case being the function's positional
    arguments (a tuple, or one value); shorter tuples take the function's defaults."""
    tuples = [c if isinstance(c, tuple) else (c,) for c in cases]

    def decorate(function: Callable[..., None]) -> Any:
        def test(case: tuple[Any, ...]) -> None:
            function(*case)

        test.__name__ = test.__qualname__ = function.__name__
        return pytest.mark.parametrize("case", tuples, ids=[_case_id(c) for c in tuples])(test)

    return decorate


def cartesian_params(*axes: tuple[Any, ...]) -> Callable[[Callable[..., None]], Any]:
    """nose2's ``cartesian_params``: one test per element of the axes' product."""
    return params(*itertools.product(*axes))


@contextmanager
def assert_warns(glob: str) -> Iterator[None]:
    """DALI's ``nose_utils.assert_warns(glob=...)``: the block warns with a message in which
    ``glob`` is found (anywhere in it, case ignored)."""
    pattern = fnmatch.translate(glob).removesuffix(r"\Z")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    messages = [str(w.message) for w in caught]
    assert any(re.search(pattern, m, re.IGNORECASE) for m in messages), \
        f"no warning matching {glob!r}; warnings: {messages}"


@contextmanager
def assert_raises(exception: type[BaseException], glob: str) -> Iterator[None]:
    """DALI's ``nose_utils.assert_raises(exception, glob=...)``: the block raises
    ``exception`` with a message in which ``glob`` is found (anywhere in it, case ignored)."""
    pattern = fnmatch.translate(glob).removesuffix(r"\Z")
    with pytest.raises(exception) as caught:
        yield
    assert re.search(pattern, str(caught.value), re.IGNORECASE), \
        f"{exception.__name__} raised, but its message does not match {glob!r}: {caught.value}"


def _check_batch(batch1: Any, batch2: Any, batch_size: int, eps: float = 1e-07) -> None:
    assert len(batch1) == len(batch2) == batch_size, \
        f"batch sizes {len(batch1)} and {len(batch2)}, expected {batch_size}"
    for i in range(batch_size):
        a, b = np.asarray(batch1.at(i)), np.asarray(batch2.at(i))
        assert a.shape == b.shape, f"sample {i}: shapes {a.shape} and {b.shape}"
        assert a.dtype == b.dtype, f"sample {i}: types {a.dtype} and {b.dtype}"
        if a.dtype.kind == "f":
            assert np.allclose(a, b, rtol=0, atol=eps, equal_nan=True), f"sample {i} differs"
        else:
            assert np.array_equal(a, b), f"sample {i} differs"


def compare_pipelines(pipe1: Any, pipe2: Any, batch_size: int, n_iterations: int,
                      eps: float = 1e-07) -> None:
    """DALI's ``test_utils.compare_pipelines``: ``n_iterations`` runs of both give the same
    outputs, sample by sample, with the same layouts."""
    for _ in range(n_iterations):
        out1, out2 = pipe1.run(), pipe2.run()
        assert len(out1) == len(out2), f"{len(out1)} outputs and {len(out2)}"
        for batch1, batch2 in zip(out1, out2, strict=True):
            assert batch1.layout() == batch2.layout()
            _check_batch(batch1, batch2, batch_size, eps)
