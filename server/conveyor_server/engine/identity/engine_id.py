"""The engine's identity in a checkpoint, and the one rule for refusing a restore.

A checkpoint records, for the operators its pipeline uses, the behaviour digests of the
server that wrote it (``behaviour/``), with the key schedule, Conveyor's output-behaviour
version and, to explain a difference, the library versions and CPU features. A server
restores it only where it would compute the same bytes: same key schedule, same output
version, and the same digest for every behaviour key the pipeline uses. Operators the
pipeline does not use do not matter; nor do library versions or CPUs that compute the
same bytes. A GPU operator (``...@gpu``) also needs the same GPU path (``gpu_path.py``: GPU
model, driver, CUDA runtime, nvImageCodec and nvJPEG, decode backends): its probe cannot
show which backend decodes which sample, so another GPU path is refused even where the
probe's bytes agree.
"""

from __future__ import annotations

import cv2
import numpy as np

from conveyor.v1 import checkpoint_pb2, pipeline_pb2
from conveyor_server.engine import keyed_random
from conveyor_server.engine.identity.behaviour.measure import Behaviour, key_of

#: Conveyor's output-behaviour version. Raise it only when a release changes outputs in a
#: way the probes cannot see (sample order, batching, how operators are chained); an
#: operator's own output changes are caught by its digest
#: (``tests/engine/test_behaviour_golden.py``).
OUTPUT_VERSION = 1


#: The operators whose device="mixed" form decodes with nvImageCodec.
DECODERS = ("decoders.image", "decoders.image_random_crop", "decoders.image_crop")
#: The operators whose CPU form decodes a JPEG's window alone with nvImageCodec, where it
#: is installed (``ops/jpeg_region.py``).
WINDOW_DECODERS = ("decoders.image_random_crop", "decoders.image_crop", "decoders.image_slice")


def _on_gpu(op: pipeline_pb2.OpSpec) -> bool:
    return op.device not in ("", "cpu")


def libraries(spec: pipeline_pb2.PipelineSpec) -> tuple[str, str]:
    """(decoder, warp) library descriptions for ``spec``'s operators."""
    from conveyor_server.engine.ops.decode import jpeg_region
    from conveyor_server.engine.ops.decode.decode import DECODER_ID

    decoder = DECODER_ID
    if jpeg_region.available() and any(op.type in WINDOW_DECODERS and not _on_gpu(op)
                                       for op in spec.ops):
        from conveyor_server.engine.ops.decode.nvimgcodec_batch import nvimgcodec_version

        decoder += f"; nvimgcodec {nvimgcodec_version()} (windows)"
    if any(op.type in DECODERS and _on_gpu(op) for op in spec.ops):
        from conveyor_server.engine.identity.gpu_path import nvjpeg_version
        from conveyor_server.engine.ops.decode.nvimgcodec_batch import nvimgcodec_version

        decoder = (f"nvimgcodec {nvimgcodec_version() or 'none'}; "
                   f"nvjpeg {nvjpeg_version() or 'none'}")
    return decoder, f"opencv {cv2.__version__}; numpy {np.__version__}"


def gpu_description(spec: pipeline_pb2.PipelineSpec) -> str:
    """The GPU path ``spec``'s GPU operators run on here (``gpu_path.py``), with each GPU
    decoder's backends; "" for a pipeline without GPU operators."""
    gpu_ops = [(i, op) for i, op in enumerate(spec.ops) if _on_gpu(op)]
    if not gpu_ops:
        return ""
    from conveyor.definition.schemas.registry import decode_args
    from conveyor_server.engine.identity.gpu_path import gpu_path
    from conveyor_server.engine.ops.decode.nvimgcodec_batch import describe_backends, gpu_target

    backends = "; ".join(
        f"op {i}: "
        f"{describe_backends(gpu_target(spec.device_id, decode_args(op)['hw_decoder_load']))}"
        for i, op in gpu_ops if op.type in DECODERS)
    return gpu_path(spec.device_id).describe(backends)


def engine_id(spec: pipeline_pb2.PipelineSpec, behaviour: Behaviour) -> checkpoint_pb2.EngineId:
    """The identity a checkpoint of ``spec`` made by this engine records."""
    decoder, warp = libraries(spec)
    keys = sorted({key_of(op) for op in spec.ops})
    return checkpoint_pb2.EngineId(
        decoder=decoder, warp=warp, key_schedule=keyed_random.KEY_SCHEDULE,
        output_version=OUTPUT_VERSION, cpu=behaviour.cpu, gpu=gpu_description(spec),
        ops=[checkpoint_pb2.OpBehaviour(key=k, digest=behaviour.digests.get(k, b""))
             for k in keys])


def _what_differs(old: checkpoint_pb2.EngineId, new: checkpoint_pb2.EngineId) -> str:
    parts = [f"{label}: checkpoint {a!r}, this server {b!r}"
             for label, a, b in (("CPU", old.cpu, new.cpu), ("GPU", old.gpu, new.gpu),
                                 ("decoder", old.decoder, new.decoder),
                                 ("libraries", old.warp, new.warp)) if a != b]
    if not parts:
        return "same libraries and CPU features (another build of them)"
    return "; ".join(parts)


def difference(old: checkpoint_pb2.EngineId, new: checkpoint_pb2.EngineId) -> str | None:
    """Why a checkpoint with engine ``old`` would stream other bytes on this server (whose
    identity for the same spec is ``new``), naming the operator; None when it would not."""
    if old.key_schedule != new.key_schedule:
        return (f"random key schedule: checkpoint has {old.key_schedule}, this server has "
                f"{new.key_schedule}")
    if old.output_version != new.output_version:
        if old.output_version == 0:
            return ("the checkpoint was written by a server from before behaviour "
                    "identities (it records no operator digests)")
        return (f"output-behaviour version: checkpoint has {old.output_version}, this server "
                f"has {new.output_version}")
    ours = {b.key: b.digest for b in new.ops}
    for then in old.ops:
        now = ours.get(then.key)
        op = then.key.split("@")[0].split("[")[0]
        if not now:
            return (f"operator {op!r} ({then.key}): this server cannot compute it (no such "
                    "operator or device here)")
        if then.key.endswith("@gpu") and old.gpu != new.gpu:
            return (f"operator {op!r} ({then.key}) runs on another GPU path on this server, "
                    f"whose bytes the checkpoint's do not vouch for: GPU: checkpoint "
                    f"{old.gpu!r}, this server {new.gpu!r}")
        if not then.digest or then.digest != now:
            return (f"operator {op!r} ({then.key}) computes other bytes on this server "
                    f"(behaviour digest {then.digest.hex() or 'none'} in the checkpoint, "
                    f"{now.hex()} here): {_what_differs(old, new)}")
    missing = sorted(set(ours) - {b.key for b in old.ops})
    if missing:
        return f"the checkpoint records no behaviour for {', '.join(missing)}"
    return None
