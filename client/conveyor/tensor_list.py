"""``TensorList``: one output of one batch, shaped like DALI's TensorListCPU."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np


class TensorList:
    """A batch of samples of one dtype and layout; sample shapes may differ."""

    __slots__ = ("_layout", "_samples", "dtype")

    def __init__(self, samples: Sequence[np.ndarray], layout: str = "",
                 dtype: np.dtype | None = None) -> None:
        self._samples = list(samples)
        self._layout = layout
        if dtype is None:
            dtype = self._samples[0].dtype if self._samples else np.dtype(np.uint8)
        self.dtype = np.dtype(dtype)

    def __len__(self) -> int:
        return len(self._samples)

    def __getitem__(self, i: int) -> np.ndarray:
        return self._samples[i]

    def __iter__(self) -> Iterator[np.ndarray]:
        return iter(self._samples)

    def at(self, i: int) -> np.ndarray:
        return self._samples[i]

    def shape(self) -> list[tuple[int, ...]]:
        return [tuple(s.shape) for s in self._samples]

    def layout(self) -> str:
        return self._layout

    def is_dense_tensor(self) -> bool:
        shapes = self.shape()
        return all(s == shapes[0] for s in shapes)

    def as_array(self) -> np.ndarray:
        """All samples stacked into one array; needs uniform shapes."""
        if not self.is_dense_tensor():
            raise ValueError(f"samples have different shapes {sorted(set(self.shape()))}; "
                             "as_array needs uniform shapes")
        if not self._samples:
            return np.empty((0,), dtype=self.dtype)
        view = self._adjacent_view()
        return view if view is not None else np.stack(self._samples)

    def _adjacent_view(self) -> np.ndarray | None:
        """The batch as one view, when the samples lie back to back in one buffer (as a
        batch received over the network does); None otherwise."""
        first = self._samples[0]
        base = first.base
        if not isinstance(base, np.ndarray) or not base.flags.c_contiguous:
            return None
        start = first.__array_interface__["data"][0]
        for i, sample in enumerate(self._samples):
            if (sample.base is not base or not sample.flags.c_contiguous
                    or sample.__array_interface__["data"][0] != start + i * first.nbytes):
                return None
        offset = start - base.__array_interface__["data"][0]
        return np.ndarray((len(self._samples), *first.shape), dtype=self.dtype, buffer=base,
                          offset=offset)

    as_tensor = as_array

    def as_cpu(self) -> TensorList:
        return self

    def __repr__(self) -> str:
        return f"TensorList(len={len(self)}, dtype={self.dtype}, layout={self._layout!r})"
