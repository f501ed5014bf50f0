"""A torch ``DataLoader`` (or torchdata ``StatefulDataLoader``) with worker processes whose
first batch fails, its workers ended before the test goes on."""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Iterable
from typing import Any


def first_batch_error(make_loader: Callable[[], Iterable[Any]]) -> Exception:
    """What taking the first batch of the loader ``make_loader`` makes raised (an
    AssertionError if a batch came), with the loader's worker processes ended before this
    returns (asserted). The loader is made here, so that nothing else holds it (a
    ``StatefulDataLoader`` holds its iterator).

    torch re-raises a worker's error from a frame that holds it, so the error's traceback
    holds the loader's iterator in a reference cycle: left alone, the iterator is freed by
    a later garbage collection, in whichever test runs then, with its queues possibly
    finalised first; each worker's join then waits out torch's status interval (5 s a
    worker). Dropping the traceback frees the iterator here, which stops its workers at
    once."""
    before = set(multiprocessing.active_children())
    loader = make_loader()
    stream = iter(loader)
    try:
        next(stream)
    except Exception as exc:  # what it raised is the answer
        raised = exc
    else:
        raise AssertionError("the loader gave a batch; expected its workers to refuse")
    raised.__traceback__ = None
    del stream, loader
    left = set(multiprocessing.active_children()) - before
    assert not left, f"the loader's worker processes still run: {left}"
    return raised
