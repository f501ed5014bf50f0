"""Source stages: the stateful operators (the file reader's order, random number
generators, external sources, the epoch ends their batches meet:
``external_source_epochs.py``, and which callables an external source may name:
``source_callables.py``; parallel external sources' worker processes: ``parallel_calls.py``,
``source_pool.py``, ``source_process.py``, ``source_worker.py``, and the rule both sides
check results by, ``source_results.py``), and where they stand: at a pipeline's start and
at any later step (``positions.py``), for a data-parallel rank at its share of the global
batches (``job_share.py``).

Every stage follows one contract, so one save/restore property test covers them all:

- ``reset(state)``: go to ``state`` (``None``: the initial state). O(1) in the position.
- ``next()``: the values of the next batch, one per sample.
- ``get_state()``: the state before the next ``next()``.
- ``advanced(state, samples)``: the state ``samples`` samples after ``state``, computed
  without stepping (a pure function), so the engine can checkpoint any position it
  produced without keeping snapshots.

Positions count samples from the pipeline's start up to ``MAX_SAMPLES``, far beyond any
training run and within the 64 bits that states and keyed draws hold; a stored state past
it is corrupt.

Imports: ``ops`` (the probe contract) and the foundation ``keyed_random``.
"""

from __future__ import annotations

from typing import Any, Protocol

from conveyor.v1 import checkpoint_pb2

#: The furthest position, in samples from a pipeline's start, a stage goes to.
MAX_SAMPLES = 2**62


class SourceStage(Protocol):
    op_index: int

    def reset(self, state: checkpoint_pb2.OpState | None) -> None: ...

    def next(self) -> list[Any]: ...

    def get_state(self) -> checkpoint_pb2.OpState: ...

    def advanced(self, state: checkpoint_pb2.OpState, samples: int) -> checkpoint_pb2.OpState: ...
