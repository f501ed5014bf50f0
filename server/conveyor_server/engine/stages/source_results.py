"""What an external source's callable returned, as the samples of a batch: one rule for the
stage (serial) and for its worker processes (``parallel=True``), so that both accept and
refuse the same results with the same words.

``SourceShape`` holds what a source's results must be (the batch size, the number of
outputs, their dtypes and numbers of dimensions); it travels to worker processes as JSON.
A result that cannot be the batch raises ``BadResult`` saying what is wrong; the stage
names the source and the position.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


class BadResult(Exception):
    """A source's result that cannot be its sample or batch; ``what`` says why."""

    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what


@dataclass(frozen=True)
class SourceShape:
    batch_size: int
    num_outputs: int
    #: Whether the callable returns a tuple of ``num_outputs`` (DALI's ``num_outputs`` given).
    tupled: bool
    #: Each output's dtype name, where ``dtype`` gives one.
    dtypes: tuple[str | None, ...]
    #: Each output's number of dimensions, where ``ndim`` or ``layout`` give one.
    ndims: tuple[int | None, ...]

    def as_json(self) -> dict[str, Any]:
        return {"batch_size": self.batch_size, "num_outputs": self.num_outputs,
                "tupled": self.tupled, "dtypes": list(self.dtypes), "ndims": list(self.ndims)}

    @classmethod
    def from_json(cls, held: dict[str, Any]) -> SourceShape:
        return cls(int(held["batch_size"]), int(held["num_outputs"]), bool(held["tupled"]),
                   tuple(held["dtypes"]), tuple(held["ndims"]))

    def sample(self, result: Any) -> tuple[np.ndarray, ...]:
        """One sample's outputs from a ``batch=False`` callable's result."""
        return tuple(self._array(o, part) for o, part in enumerate(self._split(result)))

    def batch(self, result: Any) -> list[tuple[np.ndarray, ...]]:
        """A batch's samples (each its outputs) from a ``batch=True`` callable's result."""
        columns = [self._column(o, part) for o, part in enumerate(self._split(result))]
        return [tuple(c[i] for c in columns) for i in range(self.batch_size)]

    def _split(self, result: Any) -> Sequence[Any]:
        if not self.tupled:
            return (result,)
        if not isinstance(result, tuple | list) or len(result) != self.num_outputs:
            raise BadResult(f"returned {type(result).__name__}, expected a tuple of "
                            f"num_outputs={self.num_outputs}")
        return result

    def _column(self, output: int, batch: Any) -> list[np.ndarray]:
        if isinstance(batch, np.ndarray) and batch.ndim >= 1:
            items: Sequence[Any] = list(batch)
        elif isinstance(batch, list | tuple):
            items = batch
        else:
            raise BadResult(f"output {output}: returned {type(batch).__name__}, expected a "
                            "batch (a list of arrays, or one array)")
        if len(items) != self.batch_size:
            raise BadResult(f"output {output}: returned {len(items)} samples, the batch size "
                            f"is {self.batch_size}")
        return [self._array(output, item) for item in items]

    def _array(self, output: int, value: Any) -> np.ndarray:
        try:
            array = np.array(value, order="C", copy=True)
        except (TypeError, ValueError) as exc:
            raise BadResult(f"output {output}: {exc}") from None
        if array.dtype.kind not in "biuf":
            raise BadResult(f"output {output}: returned {array.dtype} data, expected numbers")
        want, ndim = self.dtypes[output], self.ndims[output]
        if want is not None and array.dtype != np.dtype(want):
            raise BadResult(f"output {output}: returned {array.dtype}, dtype is {want}")
        if ndim is not None and array.ndim != ndim:
            raise BadResult(f"output {output}: returned {array.ndim} dimensions, expected "
                            f"{ndim} (ndim, layout)")
        return array
