"""DALI's ``TensorCPU`` and ``TensorListCPU``: what a pipeline made through ``conveyor.dali``
returns from ``run()``.

Conveyor's own ``TensorList`` gives numpy arrays (``tl[i]``, ``tl.as_tensor()``); code
written for DALI calls methods on them instead (``images[0].shape()``,
``labels.as_tensor().shape()``), as DALI's ``TensorCPU`` has them. ``TensorListCPU`` is a
``TensorList`` (every consumer of one takes it) whose samples and stacked tensor are
``TensorCPU``s; ``at(i)`` and ``as_array()`` stay numpy arrays, as in DALI. A ``TensorCPU``
holds its array without copying; ``np.asarray(t)``, ``t.as_array()`` and DLPack
(``torch.from_dlpack(t)``) give it back.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, overload

import numpy as np

from conveyor.tensor_list import TensorList
from conveyor.types import DALIDataType

__all__ = ["TensorCPU", "TensorListCPU"]

_DATA_TYPES = {member.value: member for member in DALIDataType}


class TensorCPU:
    """One sample (or a batch stacked), as DALI's ``TensorCPU``: ``shape()`` and
    ``layout()`` are methods, ``dtype`` is a ``types.DALIDataType`` (a numpy dtype where
    DALI has no name for it)."""

    __slots__ = ("_array", "_layout")

    def __init__(self, array: np.ndarray, layout: str = "") -> None:
        self._array = np.asarray(array)  # (a 0-d sample may come as a numpy scalar)
        self._layout = layout

    def shape(self) -> list[int]:
        return list(self._array.shape)

    def layout(self) -> str:
        return self._layout

    @property
    def dtype(self) -> DALIDataType | np.dtype[Any]:
        return _DATA_TYPES.get(self._array.dtype.name, self._array.dtype)

    @property
    def ndim(self) -> int:
        return int(self._array.ndim)

    def as_array(self) -> np.ndarray:
        """The sample as a numpy array (no copy)."""
        return self._array

    def as_cpu(self) -> TensorCPU:
        return self

    def squeeze(self, dim: int | None = None) -> bool:
        """DALI's in-place squeeze: drops the axes of extent 1 (only ``dim``, where given)
        and their layout letters; whether the shape changed."""
        axes = [i for i, n in enumerate(self._array.shape) if n == 1 and dim in (None, i)]
        if not axes:
            return False
        self._array = np.squeeze(self._array, axis=tuple(axes))
        if self._layout:
            self._layout = "".join(c for i, c in enumerate(self._layout) if i not in axes)
        return True

    def data_ptr(self) -> int:
        return int(self._array.__array_interface__["data"][0])

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        array = self._array if dtype is None else self._array.astype(dtype, copy=False)
        return array.copy() if copy else array

    def __dlpack__(self, **kwargs: Any) -> Any:
        return self._array.__dlpack__(**kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        device: tuple[int, int] = self._array.__dlpack_device__()
        return device

    def __repr__(self) -> str:
        return (f"TensorCPU(shape={self.shape()}, dtype={self.dtype}, "
                f"layout={self._layout!r})")


class TensorListCPU(TensorList):
    """A batch output as DALI gives it: ``tl[i]`` and iteration give ``TensorCPU``s,
    ``as_tensor()`` the batch stacked as one; ``at(i)`` a numpy array."""

    __slots__ = ()

    @classmethod
    def of(cls, batch: TensorList) -> TensorListCPU:
        """``batch``'s samples (not copied) as DALI's tensor list."""
        return cls([batch.at(i) for i in range(len(batch))], layout=batch.layout(),
                   dtype=batch.dtype)

    @overload  # type: ignore[override]
    def __getitem__(self, i: int) -> TensorCPU: ...

    @overload
    def __getitem__(self, i: slice) -> TensorListCPU: ...

    def __getitem__(self, i: int | slice) -> TensorCPU | TensorListCPU:
        if isinstance(i, slice):
            return TensorListCPU(self._samples[i], layout=self.layout(),
                                 dtype=self.dtype)
        return TensorCPU(self.at(i), self.layout())

    def __iter__(self) -> Iterator[TensorCPU]:  # type: ignore[override]
        return (TensorCPU(sample, self.layout()) for sample in self._samples)

    def as_tensor(self) -> TensorCPU:  # type: ignore[override]
        """The samples (of one shape) stacked; its layout the samples' with ``N`` first."""
        layout = self.layout()
        return TensorCPU(self.as_array(), f"N{layout}" if layout else "")

    def as_reshaped_tensor(self, shape: list[int]) -> TensorCPU:
        return TensorCPU(self.as_array().reshape(shape))

    def __repr__(self) -> str:
        return (f"TensorListCPU(len={len(self)}, dtype={self.dtype}, "
                f"layout={self.layout()!r})")
