"""Engine identity by behaviour: the probes, what a checkpoint records, and the refusals."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from conveyor.definition.schemas.registry import SCHEMAS
from conveyor.errors import CheckpointMismatch
from conveyor_server import Pipeline
from conveyor_server.demo.run import rotate_pipeline
from conveyor_server.engine.identity import checkpoint as ckpt
from conveyor_server.engine.identity.behaviour.measure import (
    _context,
    measure,
    process_behaviour,
)
from conveyor_server.engine.ops import registry
from conveyor_server.engine.ops.probes.probe_set import OP_PROBES, SOURCE_PROBES
from tests.support.images import make_image_folder
from tests.support.resume import batch_bytes, run_batches

ROTATE_KEYS = {"readers.file@cpu", "decoders.image@cpu", "random.uniform@cpu",
               "rotate[linear]@cpu"}


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_image_folder(tmp_path_factory.mktemp("behaviour") / "imgs", counts=(4, 4))


def test_every_operator_and_source_has_a_probe() -> None:
    assert set(SCHEMAS) == set(OP_PROBES) | set(SOURCE_PROBES)
    assert set(registry.registered()) <= set(OP_PROBES)


@pytest.mark.parametrize("op_type", sorted(OP_PROBES))
def test_probe_cases_run_without_errors_in_every_form(op_type: str) -> None:
    """A probe that raises digests only the error's name: every case must compute."""
    probe = OP_PROBES[op_type]
    for variant in probe.variants:
        for case in probe.cases(variant):
            for per in registry.forms(op_type):
                op = registry.build(_context(op_type, case, "cpu"), per)
                if isinstance(op, registry.SampleOp):
                    outs = [op.fn(inputs, targs)[0] for inputs, targs in case.samples]
                else:
                    batch = [[s[0][i] for s in case.samples]
                             for i in range(len(case.samples[0][0]))]
                    targs = {k: [s[1][k] for s in case.samples] for k in case.samples[0][1]}
                    outs = list(op.fn(batch, targs)[0])
                assert len(outs) == len(case.samples) and all(o.size for o in outs)


def test_measuring_twice_gives_the_same_digests() -> None:
    assert measure().digests == process_behaviour().digests


def test_a_checkpoint_records_the_ops_its_pipeline_uses(data: Path) -> None:
    body = Pipeline(rotate_pipeline(str(data))).checkpoint_body()
    assert {b.key for b in body.engine.ops} == ROTATE_KEYS
    digests = process_behaviour().digests
    assert all(b.digest == digests[b.key] and len(b.digest) == 12 for b in body.engine.ops)
    assert body.engine.output_version >= 1 and "numpy" in body.engine.cpu


def test_a_changed_digest_of_a_used_op_is_refused_naming_it(data: Path) -> None:
    spec = rotate_pipeline(str(data))
    blob = Pipeline(spec).checkpoint()
    measured = process_behaviour()
    other = dataclasses.replace(measured, cpu="x86_64; numpy baseline; opencv baseline",
                                digests={**measured.digests, "rotate[linear]@cpu": b"\0" * 12})
    with pytest.raises(CheckpointMismatch, match=r"operator 'rotate' \(rotate\[linear\]@cpu\) "
                       r"computes other bytes.*CPU: checkpoint 'x86_64; numpy"):
        Pipeline(spec, checkpoint=blob, behaviour=other)
    # A digest of an operator the pipeline does not use does not matter.
    unused = dataclasses.replace(measured, digests={**measured.digests,
                                                    "rotate[cubic]@cpu": b"\0" * 12})
    with Pipeline(spec, checkpoint=blob, behaviour=unused) as pipe:
        assert pipe.batches_returned == 0


def test_other_library_versions_with_the_same_behaviour_restore_exactly(data: Path) -> None:
    spec = rotate_pipeline(str(data))
    with Pipeline(spec) as pipe:
        run_batches(pipe, 2)
        body = pipe.checkpoint_body()
        expected = batch_bytes(pipe.run())
    body.engine.decoder = "opencv 9.9.9; simplejpeg 9.9"
    body.engine.warp = "opencv 9.9.9; numpy 9.9"
    with Pipeline(spec, checkpoint=ckpt.seal(body)) as restored:
        assert batch_bytes(restored.run()) == expected


@pytest.mark.parametrize(("change", "message"), [
    ("output_version", "output-behaviour version: checkpoint has 99"),
    ("no_digests", "from before behaviour identities"),
    ("key_schedule", "random key schedule: checkpoint has 99"),
    ("missing_key", "records no behaviour for rotate"),
])
def test_identity_refusals(data: Path, change: str, message: str) -> None:
    spec = rotate_pipeline(str(data))
    body = Pipeline(spec).checkpoint_body()
    if change == "output_version":
        body.engine.output_version = 99
    elif change == "no_digests":
        body.engine.output_version = 0
        del body.engine.ops[:]
    elif change == "key_schedule":
        body.engine.key_schedule = 99
    else:
        kept = [b for b in body.engine.ops if not b.key.startswith("rotate")]
        del body.engine.ops[:]
        body.engine.ops.extend(kept)
    with pytest.raises(CheckpointMismatch, match=message):
        Pipeline(spec, checkpoint=ckpt.seal(body))


def test_the_seed_pipelines_checkpoint_stays_under_1_kib(data: Path) -> None:
    with Pipeline(rotate_pipeline(str(data))) as pipe:
        run_batches(pipe, 3)
        assert len(pipe.checkpoint()) <= 1024


def test_probe_inputs_are_the_same_bits_everywhere() -> None:
    """The synthetic inputs come from integer arithmetic: pin a few of them."""
    from conveyor_server.engine.ops.probes.inputs import image, probe_files

    assert image(7, 5, 3)[3, 2].tolist() == image(7, 5, 3)[3, 2].tolist()
    first = image(29, 37, 3)
    assert first.dtype == np.uint8 and first.shape == (29, 37, 3) and first.std() > 0
    names = [name for name, _ in probe_files()]
    assert {"jpeg_420.jpg", "jpeg_exif6.jpg", "png_16bit.png", "webp_lossy.webp"} <= set(names)
