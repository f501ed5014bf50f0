"""``conveyor.jax`` and ``conveyor.dali.plugin.jax``: batches as ``jax.Array``s (CPU JAX).

Each sample's label is its number (1..7), so a batch says which samples it holds. The
iterator's state goes into a new iterator, which goes on right after the saved batches, in
process and on a server; sharded over two (host) devices, each device holds its half of
the batch; DALI's JAX iterator and decorators yield what DALI's would.

Run in a process of their own by ``test_jax.py`` (JAX's threads make a later fork in the
suite's process unsafe).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import jax
import numpy as np
import pytest

from conveyor.dali import fn, pipeline_def
from conveyor.dali.plugin.base_iterator import IteratorArgumentError
from conveyor.dali.plugin.jax import (
    DALIGenericIterator,
    LastBatchPolicy,
    data_iterator,
    peekable_data_iterator,
)
from conveyor.errors import InvalidArgument
from conveyor.jax import ConveyorIterator
from tests.support.images import make_image_folder
from tests.support.servers import Start, client

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def seven(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_image_folder(tmp_path_factory.mktemp("seven") / "imgs", counts=(7,))


def files_of(root: Path) -> list[str]:
    return sorted(str(p) for p in root.rglob("*.jpg"))


def graph(files: list[str], shard_id: int = 0, num_shards: int = 1) -> Any:
    _, labels = fn.readers.file(files=files, labels=list(range(1, len(files) + 1)),
                                name="Reader", shard_id=shard_id, num_shards=num_shards)
    return labels


numbered = pipeline_def(batch_size=2, num_threads=1, seed=5, enable_checkpointing=True)(graph)


def labels_of(step: Any) -> list[int]:
    array = step["label"] if isinstance(step, dict) else step[0]
    assert isinstance(array, jax.Array)
    return [int(v) for v in np.asarray(array).reshape(-1)]


def test_an_in_process_pipeline_gives_jax_arrays_and_its_state_resumes(seven: Path) -> None:
    files = files_of(seven)
    it = ConveyorIterator(numbered(files), ["label"])
    assert [labels_of(next(it)) for _ in range(3)] == [[1, 2], [3, 4], [5, 6]]
    state = json.loads(json.dumps(it.get_state()))  # JSON-able, as Orbax/Grain save it
    expected = [labels_of(next(it)) for _ in range(3)]
    assert expected == [[7, 1], [2, 3], [4, 5]]

    again = ConveyorIterator(numbered(files), ["label"])
    again.set_state(state)
    assert [labels_of(next(again)) for _ in range(3)] == expected
    assert again.batches == 6


def test_a_remote_pipeline_gives_jax_arrays_and_its_state_resumes_on_another_server(
        start_server: Start, seven: Path) -> None:
    files = files_of(seven)
    a, b = start_server(roots=[seven]), start_server(roots=[seven])
    with client(a) as first:
        it = ConveyorIterator(first.open("jax-labels", numbered(files)))
        assert [labels_of(next(it)) for _ in range(2)] == [[1, 2], [3, 4]]
        state = it.get_state()
        it.close()
    assert state == {"version": 1, "batches": 2, "pipeline": "jax-labels"}
    a.kill()
    with client(b) as second:
        again = ConveyorIterator(second.open("jax-labels", numbered(files), consumed=0))
        again.set_state(state)
        assert [labels_of(next(again)) for _ in range(2)] == [[5, 6], [7, 1]]
        again.close()


def test_the_state_and_the_arguments_are_checked(seven: Path) -> None:
    with pytest.raises(InvalidArgument, match="one per output"):
        ConveyorIterator(numbered(files_of(seven)), ["a", "b"])
    it = ConveyorIterator(numbered(files_of(seven)))
    with pytest.raises(InvalidArgument, match="state version"):
        it.set_state({"version": 9, "batches": 1})
    with pytest.raises(InvalidArgument, match="takes a pipeline"):
        ConveyorIterator(object())


SHARDED = """
import json, sys
import jax, numpy as np
from conveyor.dali import fn, pipeline_def
from conveyor.dali.plugin.jax import data_iterator
from conveyor.jax import ConveyorIterator, batch_sharding

files = json.loads(sys.argv[1])
assert len(jax.local_devices()) == 2, jax.local_devices()

@pipeline_def(batch_size=4, num_threads=1, seed=5)
def labels():
    _, labels = fn.readers.file(files=files, labels=list(range(1, 8)), name="Reader")
    return labels

batch = next(ConveyorIterator(labels(), ["label"], sharding=batch_sharding()))["label"]
halves = sorted((s.device.id, np.asarray(s.data).reshape(-1).tolist())
                for s in batch.addressable_shards)

@data_iterator(output_map=["label"], reader_name="Reader", batch_size=4, num_threads=1,
               seed=5, sharding=batch_sharding())
def sharded(shard_id, num_shards):
    _, labels = fn.readers.file(files=files, labels=list(range(1, 8)), name="Reader",
                                shard_id=shard_id, num_shards=num_shards)
    return labels

step = next(sharded())["label"]
per_device = sorted((s.device.id, np.asarray(s.data).reshape(-1).tolist())
                    for s in step.addressable_shards)
print(json.dumps({"halves": halves, "global": list(batch.shape),
                  "dali": per_device, "dali_global": list(step.shape)}))
"""


def test_sharded_over_two_devices_each_holds_its_half_of_the_batch(seven: Path) -> None:
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=2",
           "JAX_PLATFORMS": "cpu",
           "PYTHONPATH": os.pathsep.join([str(REPO / "client"), str(REPO / "server"),
                                          os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", SHARDED, json.dumps(files_of(seven))],
                          env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["halves"] == [[0, [1, 2]], [1, [3, 4]]] and got["global"] == [4, 1]
    # data_iterator: one pipeline per device, each on its shard (DALI's 7 samples over two
    # shards: 1..3 and 4..7) with half the batch
    assert got["dali"] == [[0, [1, 2]], [1, [4, 5]]] and got["dali_global"] == [4, 1]


def test_dalis_jax_iterator_ends_epochs_by_the_reader_and_refuses_partial(seven: Path) -> None:
    files = files_of(seven)
    it = DALIGenericIterator([numbered(files)], ["label"], reader_name="Reader",
                             last_batch_policy=LastBatchPolicy.DROP)
    assert [labels_of(step) for step in it] == [[1, 2], [3, 4], [5, 6]]
    assert len(it) == 3
    with pytest.raises(IteratorArgumentError, match="PARTIAL"):
        DALIGenericIterator([numbered(files)], ["label"], reader_name="Reader",
                            last_batch_policy=LastBatchPolicy.PARTIAL)


def test_dalis_decorators_make_the_iterator_and_peek(seven: Path) -> None:
    files = files_of(seven)

    @data_iterator(output_map=["label"], reader_name="Reader", batch_size=2, num_threads=1,
                   seed=5)
    def plain(files: list[str]) -> Any:
        return graph(files)

    assert [labels_of(step) for step in plain(files)] == [[1, 2], [3, 4], [5, 6], [7, 1]]
    with pytest.raises(IteratorArgumentError, match="'seed' is given to both"):
        plain(files, seed=6)

    @peekable_data_iterator(output_map=["label"], reader_name="Reader", batch_size=2,
                            num_threads=1, seed=5)
    def peekable(files: list[str]) -> Any:
        return graph(files)

    it = peekable(files)
    assert labels_of(it.peek()) == [1, 2] and labels_of(it.peek()) == [1, 2]
    assert it.spec["label"].shape == (2, 1)
    assert labels_of(next(it)) == [1, 2] and labels_of(next(it)) == [3, 4]
