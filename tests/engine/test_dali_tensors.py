"""Through ``conveyor.dali``, a pipeline's outputs are DALI's: ``TensorListCPU``s whose
samples and ``as_tensor()`` are ``TensorCPU``s, so DALI's getting-started notebook's calls
(``labels.as_tensor().shape()``, ``images[0].shape()``) run as written. Conveyor's own
``pipeline_def`` keeps giving numpy arrays."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from conveyor import pipeline_def as conveyor_pipeline_def
from conveyor.dali import Pipeline, fn, pipeline_def, types
from conveyor.dali.plugin.pytorch import DALIClassificationIterator
from conveyor.tensor_list import TensorList
from tests.support.images import make_image_folder


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_image_folder(tmp_path_factory.mktemp("data") / "imgs", counts=(3, 4))


def graph(image_dir: str) -> Any:
    jpegs, labels = fn.readers.file(file_root=image_dir, name="Reader")
    images = fn.decoders.image(jpegs, device="cpu", output_type=types.RGB)
    return fn.resize(images, resize_x=16, resize_y=12), labels


simple_pipeline = pipeline_def(batch_size=4, num_threads=1, seed=3)(graph)


def test_the_getting_started_notebooks_calls_run_as_written(data: Path) -> None:
    pipe = simple_pipeline(str(data))
    assert isinstance(pipe, Pipeline)
    pipe.build()
    images, labels = pipe.run()
    assert labels.is_dense_tensor()
    assert labels.as_tensor().shape() == [4, 1]
    assert images[0].shape() == [12, 16, 3]
    assert images[0].layout() == "HWC" and labels.as_tensor().layout() in ("", "N")
    assert images[0].dtype == types.UINT8 and labels.as_tensor().dtype == types.INT32
    assert [t.shape() for t in images] == [[12, 16, 3]] * 4
    assert isinstance(images.at(0), np.ndarray)
    np.testing.assert_array_equal(np.array(images[1]), images.at(1))
    np.testing.assert_array_equal(images[1].as_array(), images.at(1))
    np.testing.assert_array_equal(np.asarray(labels.as_tensor()), labels.as_array())
    assert torch.equal(torch.from_dlpack(images[2]), torch.from_numpy(images.at(2).copy()))


def test_conveyors_own_pipeline_def_keeps_numpy_arrays(data: Path) -> None:
    pipe = conveyor_pipeline_def(batch_size=4, num_threads=1, seed=3)(graph)(str(data))
    pipe.build()
    images, labels = pipe.run()
    assert type(images) is TensorList
    assert isinstance(images[0], np.ndarray) and images[0].shape == (12, 16, 3)
    assert isinstance(labels.as_tensor(), np.ndarray)


def test_dali_outputs_feed_dalis_iterator_and_match_conveyors_bytes(data: Path) -> None:
    dali_pipe = simple_pipeline(str(data))
    plain = conveyor_pipeline_def(batch_size=4, num_threads=1, seed=3)(graph)(str(data))
    plain.build()
    expected = plain.run()
    step = next(iter(DALIClassificationIterator(dali_pipe, reader_name="Reader")))[0]
    assert torch.equal(step["data"], torch.from_numpy(expected[0].as_array().copy()))
    assert torch.equal(step["label"], torch.from_numpy(expected[1].as_array().copy()))
