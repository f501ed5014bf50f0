"""What the GPU planners check of a batch before planning it: the sample type the kernels
take, one type for the batch, HWC images, and the server's limits on each output, checked
over the batch; ``refuse`` checks sample by sample, as the operator checks one sample,
where a check over the batch failed, so the error names the first sample refused and why.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NoReturn

import numpy as np

from conveyor.errors import ConveyorError, Internal, InvalidArgument
from conveyor_server.engine.ops.registry import OpContext, SampleFailed


def check_types(op: str, dtype: np.dtype, allowed: Sequence[str], what: str = "images") -> None:
    """``InvalidArgument`` unless the kernels take ``dtype`` (one of ``allowed``)."""
    if dtype.name not in allowed:
        raise InvalidArgument(f"{op}: on device='gpu', {what} of type {dtype} are not supported "
                              f"(supported: {', '.join(allowed)})")


def each(images: Sequence[Any], fn: Callable[[int, Any], None]) -> None:
    """``fn`` of each sample in turn; its error is ``SampleFailed`` naming the sample."""
    for i, image in enumerate(images):
        try:
            fn(i, image)
        except ConveyorError as exc:
            raise SampleFailed(i, exc) from None


def refuse(images: Sequence[Any], check: Callable[[int, Any], None]) -> NoReturn:
    """Raise the error of the first sample ``check`` refuses (checking one sample as the
    operator does), where a check over the batch found one."""
    each(images, check)
    raise Internal("a check over the batch refused a sample that the checks of each sample "
                   "pass: report this as a bug of the GPU planners")


def shapes_of(images: Sequence[Any]) -> np.ndarray | None:
    """The images' shapes, (N, 3) int64; None where some sample is not an HWC image with
    a row, a column and a channel (``check_image`` refuses it)."""
    shapes = [image.shape for image in images]
    if any(len(s) != 3 for s in shapes):
        return None
    out = np.array(shapes, dtype=np.int64).reshape(len(shapes), 3)
    return out if out.size == 0 or out.min() >= 1 else None


def outputs_allowed(ctx: OpContext, shapes: np.ndarray, dtype: np.dtype) -> bool:
    """Whether ``ctx.limits.check_output`` passes every row of ``shapes``. What it bounds
    grows with each extent (the larger of height and width, the pixels, the bytes), so
    where the largest extents of the batch pass, every sample does; else each distinct
    shape is checked."""
    if len(shapes) == 0:
        return True
    try:
        ctx.limits.check_output(tuple(shapes.max(axis=0).tolist()), dtype)
        return True
    except ConveyorError:
        pass
    for shape in set(map(tuple, shapes.tolist())):
        try:
            ctx.limits.check_output(shape, dtype)
        except ConveyorError:
            return False
    return True


def one_dtype(op: str, images: Sequence[Any]) -> np.dtype:
    """The type the samples share (uint8 for none), or ``InvalidArgument``."""
    dtypes = {np.dtype(im.dtype) for im in images}
    if len(dtypes) > 1:
        raise InvalidArgument(f"{op}: the samples of a batch must share a type, got "
                              f"{sorted(str(t) for t in dtypes)}")
    return dtypes.pop() if dtypes else np.dtype(np.uint8)
