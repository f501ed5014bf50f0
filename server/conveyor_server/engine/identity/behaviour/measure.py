"""Run the probe set and digest the outputs per behaviour key.

A behaviour key names what computes a sample's bytes: an operator type, the variant of
it (its interpolation) and the device, as ``rotate[linear]@cpu``; random sources and
reader orders are ``random.normal@cpu``. Its digest is the SHA-256 (first
``DIGEST_BYTES``) over the dtype, shape and bytes of every probe output, in every form the
operator is registered in (per sample and per batch must agree, so both are hashed).
"""

from __future__ import annotations

import functools
import hashlib
import os
import platform
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import cv2
import numpy as np

from conveyor.definition.schemas.registry import decode_args, encode_arg, schema_of
from conveyor.errors import ConveyorError, DeviceUnavailable
from conveyor.v1 import pipeline_pb2
from conveyor_server.engine import catalog
from conveyor_server.engine.device.devices import cuda_device_count
from conveyor_server.engine.ops import registry
from conveyor_server.engine.ops.probes.probe_set import OP_PROBES, SOURCE_PROBES, Case, variant_of
from conveyor_server.engine.ops.threads import single_threaded_opencv

DIGEST_BYTES = 12
# Every operator registers its builders and its probe as its module is imported.
catalog.load()


@dataclass(frozen=True)
class Behaviour:
    """This process's behaviour digests, what it runs on, and what measuring them cost."""

    digests: Mapping[str, bytes]
    #: The CPU features the numeric libraries dispatch on (informational, for messages).
    cpu: str
    seconds: float


def behaviour_key(op_type: str, variant: str, device: str) -> str:
    return f"{op_type}[{variant}]@{device}" if variant else f"{op_type}@{device}"


def key_of(op: pipeline_pb2.OpSpec) -> str:
    """The behaviour key of one configured operator."""
    device = "cpu" if op.device in ("", "cpu") else "gpu"
    return behaviour_key(op.type, variant_of(op.type, decode_args(op)), device)


def cpu_description() -> str:
    """The machine and the SIMD paths numpy and OpenCV dispatch to, in a few words."""
    from numpy._core._multiarray_umath import (  # type: ignore[import-not-found]
        __cpu_dispatch__,
        __cpu_features__,
    )

    numpy_paths = [f for f in __cpu_dispatch__ if __cpu_features__.get(f)]
    opencv_paths = [t[1:] for t in cv2.getCPUFeaturesLine().split()
                    if t.startswith("*") and not t.endswith("?")]
    level = os.environ.get("OPENCV_IPP", "").strip().lower()  # the build IPP is held to
    ipp = "no ipp" if not cv2.ipp.useIPP() else \
        f"ipp {level}" if level in ("sse42", "avx2", "avx512") else "ipp"
    return (f"{platform.machine()}; numpy {'+'.join(numpy_paths) or 'baseline'}; "
            f"opencv {'+'.join(opencv_paths) or 'baseline'}; {ipp}")


def _context(op_type: str, case: Case, device: str) -> registry.OpContext:
    spec = pipeline_pb2.OpSpec(type=op_type, device=device, num_outputs=1)
    for name, value in case.args.items():
        spec.args[name].CopyFrom(encode_arg(op_type, name, value))
    fed = sorted({name for _, targs in case.samples for name in targs} - {registry.SAMPLE_INDEX})
    for name in fed:
        spec.arg_inputs[name].CopyFrom(pipeline_pb2.OutputRef(op=0, output=0))
    return registry.OpContext(op_type=op_type, index=1, args=decode_args(spec),
                              tensor_args=frozenset(fed), device=device,
                              input_layouts=case.input_layouts, seed=0x5EED)


def _update(h: Any, value: Any) -> None:
    array = np.asarray(value.get() if hasattr(value, "get") else value)  # device arrays too
    h.update(f"{array.dtype.str}{array.shape};".encode())
    h.update(np.ascontiguousarray(array).tobytes())


def _run_case(h: Any, op: registry.BuiltOp, case: Case) -> None:
    try:
        if isinstance(op, registry.SampleOp):
            for inputs, sample_targs in case.samples:
                for out in op.fn(inputs, sample_targs):
                    _update(h, out)
        else:
            n_inputs = len(case.samples[0][0])
            batch = [[s[0][i] for s in case.samples] for i in range(n_inputs)]
            targs: dict[str, Any] = {k: [s[1][k] for s in case.samples]
                                     for k in case.samples[0][1]}
            for output in op.fn(batch, targs):
                for out in output:
                    _update(h, out)
    except Exception as exc:  # an error is behaviour too: which one, not its wording
        h.update(f"raised {type(exc).__name__};".encode())


def _op_digest(op_type: str, variant: str, device: str) -> bytes | None:
    probe = OP_PROBES[op_type]
    h = hashlib.sha256(f"{op_type}[{variant}]".encode())
    for case in probe.cases(variant):
        ctx = _context(op_type, case, device)
        gpu_form = device == "gpu" and bool(registry.forms(op_type, "gpu"))
        for per in registry.forms(op_type, device):
            try:
                op = registry.build(ctx, per)
            except DeviceUnavailable:
                return None
            except ConveyorError as exc:
                if not gpu_form:
                    raise
                # A configuration the GPU form refuses (an interpolation, a type): behaviour.
                h.update(f"raised {type(exc).__name__};".encode())
                continue
            _run_case(h, op, case)
    return h.digest()[:DIGEST_BYTES]


def _devices(op_type: str) -> Sequence[tuple[str, str]]:
    """(label, spec device) pairs this machine can run ``op_type`` on."""
    devices = [("cpu", "cpu")]
    spec_devices = schema_of(op_type).devices
    if cuda_device_count() > 0 and ("gpu" in spec_devices or "mixed" in spec_devices):
        devices.append(("gpu", "mixed" if "mixed" in spec_devices else "gpu"))
    return devices


def measure() -> Behaviour:
    """Probe every operator and source on every device this machine has."""
    single_threaded_opencv()
    start = time.perf_counter()
    digests: dict[str, bytes] = {}
    for op_type, probe in sorted(OP_PROBES.items()):
        for variant in probe.variants:
            for label, device in _devices(op_type):
                digest = _op_digest(op_type, variant, device)
                if digest is not None:
                    digests[behaviour_key(op_type, variant, label)] = digest
    for op_type, source in sorted(SOURCE_PROBES.items()):
        h = hashlib.sha256(op_type.encode())
        for out in source():
            _update(h, out)
        digests[behaviour_key(op_type, "", "cpu")] = h.digest()[:DIGEST_BYTES]
    return Behaviour(digests, cpu_description(), time.perf_counter() - start)


@functools.cache
def process_behaviour() -> Behaviour:
    """This process's behaviour, measured once (the server measures it at start)."""
    return measure()
