"""``DALIRaggedIterator``: DALI's PyTorch iterator for outputs whose samples differ in
shape, over Conveyor pipelines: per output a dense tensor, a list of tensors (one per
sample) or a sparse COO tensor (sample ``i``'s values in row ``i``), with DALI's epochs and
a partial last batch keeping its first samples."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from conveyor.dali import fn, pipeline_def
from conveyor.dali.plugin.base_iterator import IteratorArgumentError
from conveyor.dali.plugin.pytorch import DALIRaggedIterator, LastBatchPolicy
from tests.support.images import make_image_folder

LIST, COO, DENSE = (DALIRaggedIterator.SPARSE_LIST_TAG, DALIRaggedIterator.SPARSE_COO_TAG,
                    DALIRaggedIterator.DENSE_TAG)


@pytest.fixture(scope="module")
def seven(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_image_folder(tmp_path_factory.mktemp("ragged") / "imgs", counts=(7,),
                             size=(30, 45))


@pipeline_def(batch_size=2, num_threads=1, seed=7, enable_checkpointing=True)
def ragged(root: str) -> Any:
    jpegs, labels = fn.readers.file(file_root=root, name="Reader", random_shuffle=True)
    small = fn.resize(fn.decoders.image(jpegs), resize_shorter=4)  # (4, w, 3), w varies
    return fn.reshape(small, shape=[-1]), small, labels


def expected(root: Path, batches: int) -> list[list[list[np.ndarray]]]:
    """Each batch's samples of each output, from the pipeline itself."""
    pipe = ragged(str(root))
    return [[[np.asarray(s) for s in out] for out in pipe.run()] for _ in range(batches)]


def test_lists_and_coo_tensors_hold_each_samples_values(seven: Path) -> None:
    want = expected(seven, 3)
    assert len({s.shape for b in want for s in b[0]}) > 1  # the samples differ in length
    it = DALIRaggedIterator(ragged(str(seven)), ["flat", "images", "label"],
                            reader_name="Reader", output_types=[COO, LIST, DENSE])
    for step, (flat, images, labels) in zip(it, want, strict=False):
        got = step[0]
        assert [t.numpy().tolist() for t in got["images"]] == [a.tolist() for a in images]
        coo = got["flat"]
        assert coo.is_sparse and coo.shape == (2, max(len(a) for a in flat))
        dense = coo.to_dense().numpy()
        for row, values in zip(dense, flat, strict=True):
            assert row[:len(values)].tolist() == values.tolist()
            assert not row[len(values):].any()
        assert got["label"].numpy().tolist() == np.stack(labels).tolist()


def test_a_partial_last_batch_keeps_its_first_samples(seven: Path) -> None:
    want = expected(seven, 4)
    it = DALIRaggedIterator(ragged(str(seven)), ["flat", "images", "label"],
                            reader_name="Reader", output_types=[COO, LIST, DENSE],
                            last_batch_policy=LastBatchPolicy.PARTIAL)
    last = list(it)[-1][0]
    assert len(list(it)) == 4  # auto_reset off: the second pass is an explicit reset
    assert len(last["images"]) == 1 and last["label"].shape == (1, 1)
    assert last["images"][0].numpy().tolist() == want[3][1][0].tolist()
    assert last["flat"].shape == (1, len(want[3][0][0]))
    assert last["flat"].to_dense()[0].numpy().tolist() == want[3][0][0].tolist()


def test_dense_by_default_and_tags_checked(seven: Path) -> None:
    @pipeline_def(batch_size=2, num_threads=1, seed=7)
    def labels_only(root: str) -> Any:
        _, labels = fn.readers.file(file_root=root, name="Reader")
        return labels

    step = next(DALIRaggedIterator(labels_only(str(seven)), ["label"], reader_name="Reader"))
    assert isinstance(step[0]["label"], torch.Tensor) and step[0]["label"].shape == (2, 1)
    with pytest.raises(IteratorArgumentError, match=r"\['sparse'\] are no tags"):
        DALIRaggedIterator(labels_only(str(seven)), ["label"], reader_name="Reader",
                           output_types=["sparse"])
    with pytest.raises(IteratorArgumentError, match="has 2 tags for the 1 outputs"):
        DALIRaggedIterator(labels_only(str(seven)), ["label"], reader_name="Reader",
                           output_types=[LIST, LIST])
