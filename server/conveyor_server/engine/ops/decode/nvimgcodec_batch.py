"""One batch of files decoded by one nvImageCodec call: the decoder behind ``device="mixed"``.

``BatchDecoder.decode`` checks every file as the CPU decoder does (empty, truncated JPEG,
declared size above ``limits.max_image_pixels``), the whole batch's headers read at once
(``batch_headers.py``, with each JPEG's EXIF orientation), turns each into a code stream
(over the file's own array, not a copy, where it is C-contiguous), with a region of interest
where the caller wants a window of a JPEG, and decodes them all with one
``Decoder.decode(list)`` call. Where the images go is the target's:

- on a GPU (``gpu_target``): into device memory on the pipeline's device, each image a
  CuPy array, HWC uint8; no copy through the host. The decode is enqueued on the device's
  compute stream (``engine/device/streams.py``), where the operators after it run, so nothing
  waits on the host for it: each image is wrapped as a CuPy array from its pointer, not
  through ``__cuda_array_interface__`` (through which CuPy would synchronise the image's
  stream from the host once per image). The backends, in order: the hardware
  JPEG decoder (A100, H100) taking ``hw_decoder_load`` of the batch as DALI's does, the CUDA
  decoder, the hybrid CPU+GPU decoder, then the CPU decoder;
- on the CPU (``CPU_TARGET``): into host memory, each image a numpy array, through
  nvImageCodec's CPU backend (libjpeg-turbo, OpenCV). nvImageCodec runs on a machine without
  a GPU only when given both the CPU-only device id and the CPU-only backend; CI runs this
  same path with them.

Where the size of a decoded image is known before the decode (a JPEG without EXIF rotation:
its code stream's size, or its window's), it is decoded into the batch's own buffer
(``image_memory.decode_places``): one allocation for all of them, each image a view of it,
so nothing is allocated or wrapped per image. nvImageCodec allocates the others (a rotated
photo, PNG, ...), and decodes again on its own memory any image that no backend could
decode into the buffer (on a GPU, the CPU decoder writes only to host memory).

A window is drawn by the caller's function from the image's size (``WindowFn``). For a
JPEG without EXIF rotation the size is the code stream's and only the window is decoded;
anything else (a rotated photo, PNG, ...) is decoded whole and cropped, so the window is
always drawn from the size of the image as oriented, as on the CPU.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from conveyor.errors import ConveyorError, DataFileError, DeviceUnavailable
from conveyor_server.engine.admission.limits import EngineLimits
from conveyor_server.engine.ops.decode.batch_headers import BatchHeaders, batch_headers
from conveyor_server.engine.ops.decode.image_memory import (
    DecodePlaces,
    decode_places,
    wrap_device_image,
)
from conveyor_server.engine.ops.geometry.random_window import Window
from conveyor_server.engine.ops.registry import Device, SampleFailed

#: (sample position in the batch, image height, image width) -> the window to output.
WindowFn = Callable[[int, int, int], Window]


@dataclass(frozen=True)
class DecodeTarget:
    """Where a batch is decoded: a CUDA device (``device_id``, -1: the current one) or,
    with ``device_id`` None, the CPU."""

    device_id: int | None
    #: The share of a batch the hardware JPEG decoder takes (DALI's ``hw_decoder_load``).
    hw_decoder_load: float = 0.65
    #: What the decoders may allocate ahead, once: the batch size, and DALI's
    #: ``preallocate_width_hint`` and ``preallocate_height_hint`` (0: none). They change
    #: where the decoders' buffers come from, never a decoded byte.
    batch_size: int = 0
    width_hint: int = 0
    height_hint: int = 0

    @property
    def on_gpu(self) -> bool:
        return self.device_id is not None


CPU_TARGET = DecodeTarget(None)


def gpu_target(device_id: int, hw_decoder_load: float, batch_size: int = 0, width_hint: int = 0,
               height_hint: int = 0) -> DecodeTarget:
    return DecodeTarget(device_id, hw_decoder_load, batch_size, width_hint, height_hint)


def decoder_options(target: DecodeTarget) -> str:
    """nvImageCodec's options for the target's decoders: the hardware decoder's buffers
    allocated once for a whole batch (of the hinted size, where hinted), and the CUDA
    decoder's buffers allocated ahead rather than grown batch by batch. "" on the CPU."""
    if not target.on_gpu:
        return ""
    options = ["nvjpeg_cuda_decoder:preallocate_buffers=1"]
    for name, value in (("preallocate_batch_size", target.batch_size),
                        ("preallocate_width_hint", target.width_hint),
                        ("preallocate_height_hint", target.height_hint)):
        if value > 0:
            options.append(f"nvjpeg_hw_decoder:{name}={value}")
    return " ".join(options)


def make_backends(nv: Any, target: DecodeTarget) -> list[Any]:
    """The target's ``backend_plan`` as nvImageCodec backends, each with a FIXED load
    policy: a backend takes its hinted share of every batch, never a share that adapts to
    how long earlier batches took (which backend decodes a sample, and so its bytes, must
    not depend on timing)."""
    kinds = {"hw_gpu_only": nv.BackendKind.HW_GPU_ONLY, "gpu_only": nv.BackendKind.GPU_ONLY,
             "hybrid_cpu_gpu": nv.BackendKind.HYBRID_CPU_GPU, "cpu_only": nv.BackendKind.CPU_ONLY}
    return [nv.Backend(kinds[name], load_hint=hint, load_hint_policy=nv.LoadHintPolicy.FIXED)
            for name, hint in backend_plan(target)]


def backend_plan(target: DecodeTarget) -> list[tuple[str, float]]:
    """The backends the decoder may use, in order, with their load hints: nvImageCodec's
    ``BackendKind`` names, lower case."""
    if not target.on_gpu:
        return [("cpu_only", 1.0)]
    plan = [("hw_gpu_only", target.hw_decoder_load)] if target.hw_decoder_load > 0 else []
    return [*plan, ("gpu_only", 1.0), ("hybrid_cpu_gpu", 1.0), ("cpu_only", 1.0)]


def describe_backends(target: DecodeTarget) -> str:
    """The backend plan in words, for the engine identity: ``hw_gpu_only 0.65, gpu_only,
    ...``."""
    return ", ".join(name if hint == 1.0 else f"{name} {hint:g}"
                     for name, hint in backend_plan(target))


def load_nvimgcodec(op: str, device: str) -> Any:
    """The nvImageCodec module, or ``DeviceUnavailable`` naming the operator."""
    try:
        from nvidia import nvimgcodec
    except ImportError:
        raise DeviceUnavailable(f"{op}: device={device!r}: the GPU decoder (nvImageCodec) is "
                                "not installed (the server's [gpu] extra; or use "
                                "device='cpu')") from None
    return nvimgcodec


def nvimgcodec_version() -> str:
    """nvImageCodec's version, or "" where it is not installed."""
    try:
        from nvidia import nvimgcodec
    except ImportError:
        return ""
    return str(getattr(nvimgcodec, "__version__", "unknown"))


class BatchDecoder:
    def __init__(self, op: str, device: str, output_type: str, target: DecodeTarget,
                 limits: EngineLimits) -> None:
        nv = load_nvimgcodec(op, device)
        self._nv = nv
        self._op = op
        self._target = target
        self._output_type = output_type
        self._limits = limits
        color = nv.ColorSpec.GRAY if output_type == "GRAY" else nv.ColorSpec.SRGB
        self._params = nv.DecodeParams(color_spec=color, allow_any_depth=False,
                                       apply_exif_orientation=True)
        device_id = nv.NVIMGCODEC_DEVICE_CPU_ONLY if target.device_id is None else target.device_id
        self._decoder = nv.Decoder(device_id=device_id, backends=make_backends(nv, target),
                                   options=decoder_options(target))
        # One batch at a time per operator: batches computed ahead queue here.
        self._lock = threading.Lock()

    @property
    def device(self) -> Device:
        """Where the decoded images are: "gpu", or "cpu" for the CPU target."""
        return "gpu" if self._target.on_gpu else "cpu"

    def decode(self, files: Sequence[np.ndarray], window: WindowFn | None = None) -> list[Any]:
        """One image per file, in order (CuPy arrays on a GPU, numpy arrays on the CPU);
        ``SampleFailed`` for the first file that cannot be decoded."""
        heads, streams, windows, keep = self.code_streams(files, window)
        with self._on_device():
            places = self.places(heads, streams, windows)
            with self._lock:
                images = self._run(streams, places.images)
                again = [i for i, image in enumerate(images)
                         if image is None and places.arrays[i] is not None]
                if again:  # not decodable into the buffer: on nvImageCodec's memory
                    for i, image in zip(again, self._run([streams[i] for i in again]),
                                        strict=True):
                        images[i] = image
                        places.arrays[i] = None
            del keep
            return self._arrays(files, heads, images, windows, window, places.arrays)

    def places(self, heads: BatchHeaders, streams: Sequence[Any],
               windows: Sequence[Window | None]) -> DecodePlaces:
        """Where each image of the batch is decoded: a view of one buffer for each image
        whose decoded size is known now (an upright JPEG: its window's size, or its code
        stream's), None for the others (nvImageCodec allocates them)."""
        channels = 1 if self._output_type == "GRAY" else 3
        shapes: list[tuple[int, int, int] | None] = []
        for upright, stream, win in zip(heads.upright_jpegs().tolist(), streams, windows,
                                        strict=True):
            if not upright:
                shapes.append(None)
            elif win is not None:
                shapes.append((win.h, win.w, channels))
            else:
                shapes.append((int(stream.height), int(stream.width), channels))
        if not self._target.on_gpu:
            return decode_places(self._nv, shapes, None)
        import cupy

        return decode_places(self._nv, shapes, cupy)

    def code_streams(self, files: Sequence[np.ndarray], window: WindowFn | None = None
                     ) -> tuple[BatchHeaders, list[Any], list[Window | None], list[Any]]:
        """The host's work before the decode: the batch's headers, each file's code stream
        (a region's where its window is decoded alone), those windows (None: decoded whole),
        and what the streams read from, to keep alive until the decode returns.
        ``SampleFailed`` for the first file refused, in order."""
        nv = self._nv
        heads = batch_headers(files, self._limits, self._op)
        # A C-contiguous file is read in place: the stream holds the array, no copy is made.
        in_place = heads.contiguous.tolist()
        upright = heads.upright_jpegs().tolist()
        streams = []
        keep: list[Any] = []  # the encoded bytes and the whole streams regions read from
        windows: list[Window | None] = []  # the windows decoded as regions
        for i, data in enumerate(files):
            try:
                heads.check(i)
                encoded = data if in_place[i] else data.tobytes()
                stream = nv.CodeStream(encoded)
                keep += (encoded, stream)
                win = None
                if window is not None and upright[i]:
                    win = window(i, int(stream.height), int(stream.width))
                    stream = stream.get_sub_code_stream(
                        region=nv.Region(win.y, win.x, win.y + win.h, win.x + win.w))
            except ConveyorError as exc:
                raise SampleFailed(i, exc) from None
            except (RuntimeError, ValueError) as exc:  # nvImageCodec could not parse it
                raise SampleFailed(i, DataFileError(
                    f"cannot decode the image ({data.size} bytes): {exc}")) from None
            streams.append(stream)
            windows.append(win)
        return heads, streams, windows, keep

    def _arrays(self, files: Sequence[np.ndarray], heads: BatchHeaders, images: list[Any],
                windows: list[Window | None], window: WindowFn | None,
                placed: list[Any]) -> list[Any]:
        out = []
        for i, (image, win, view) in enumerate(zip(images, windows, placed, strict=True)):
            if image is None:
                raise SampleFailed(i, DataFileError(
                    f"cannot decode the image ({files[i].size} bytes, {heads.format(i)}):"
                    " nvImageCodec could not decode it with any backend"))
            # Decoded into the batch's buffer as its view says (the decoder writes an image
            # of another size at the view's row pitch: then the image says where it is).
            array = self._oriented(view) if view is not None and \
                tuple(image.shape) == view.shape else self._array(image)
            h, w = int(array.shape[0]), int(array.shape[1])
            try:
                self._limits.check_image(h, w, "the decoded image")
                if window is not None and win is None:
                    full = window(i, h, w)
                    array = array[full.y:full.y + full.h, full.x:full.x + full.w]
            except ConveyorError as exc:
                raise SampleFailed(i, exc) from None
            out.append(self._finish(array))
        return out

    def _on_device(self) -> contextlib.AbstractContextManager[Any]:
        """The target's CUDA device as the current one and its compute stream as the
        current stream (nothing on the CPU)."""
        if not self._target.on_gpu:
            return contextlib.nullcontext()
        from conveyor_server.engine.device import streams

        return streams.computing(max(self._target.device_id or 0, 0))

    def _run(self, streams: list[Any], images: list[Any] | None = None) -> list[Any]:
        """One decode call; ``images``: where each image goes (None: nvImageCodec
        allocates it)."""
        if not self._target.on_gpu:
            return list(self._decoder.decode(streams, images=images, params=self._params))
        import cupy

        # The compute stream (current here): the operators after the decoder run on it,
        # and the copies out of the GPU (``gpu_staging.py``) wait for it.
        return list(self._decoder.decode(streams, images=images, params=self._params,
                                         cuda_stream=cupy.cuda.get_current_stream().ptr))

    def _array(self, image: Any) -> Any:
        """An image nvImageCodec allocated, as an HWC array where the target keeps images."""
        if not self._target.on_gpu:
            array: Any = np.asarray(image.cpu())
        else:
            import cupy

            if image.buffer_kind == self._nv.ImageBufferKind.STRIDED_HOST:
                array = cupy.asarray(np.asarray(image))  # a CPU backend's image, uploaded
            else:
                array = wrap_device_image(cupy, image)  # zero copy, no host wait
        return self._oriented(array)

    def _oriented(self, array: Any) -> Any:
        """An HWC array in the output type's channel order."""
        if array.ndim == 2:
            array = array[:, :, None]
        if self._output_type == "BGR":
            array = array[:, :, ::-1]
        return array

    def _finish(self, array: Any) -> Any:
        """A C-contiguous array: a crop or a reordering is copied; on a GPU an image decoded
        into the batch's buffer stays a view of it (on the CPU, an array of its own)."""
        if self._target.on_gpu:
            import cupy

            return cupy.ascontiguousarray(array)
        return np.array(array, dtype=np.uint8, order="C", copy=True)
