"""Every name a trainer, a DALI port or an operator imports from ``conveyor`` today.

Internal modules may move between the client's rooms; these import paths may not. Each
line below is an import statement a user's code makes, run in a fresh interpreter (so a
name that works only because another import loaded its module first fails here).
"""

from __future__ import annotations

import subprocess
import sys

import pytest

PUBLIC_IMPORTS = [
    # The public face.
    "from conveyor import Checkpoint, Client, RemotePipeline, TensorList, TlsOptions",
    "from conveyor import errors, fn, pipeline_def, types, __version__",
    "import conveyor; conveyor.Client; conveyor.fn.readers.file; conveyor.types.RGB",
    "from conveyor.client import Checkpoint, Client, RemotePipeline",
    "from conveyor.tensor_list import TensorList",
    "from conveyor.types import DALIDataType, DALIImageType, SampleInfo, BatchInfo",
    "from conveyor.errors import ConveyorError, InvalidArgument, SpecError, NotSupported, "
    "NotFound, AlreadyExists, FailedPrecondition, CheckpointMismatch, SpecMismatch, "
    "DataChanged, EngineMismatch, CheckpointingDisabled, Fenced, DeviceUnavailable, Aborted, "
    "DataLoss, CorruptCheckpoint, DataFileError, ExternalSourceError, Unavailable, Draining, "
    "PermissionDenied, ResourceExhausted, Unauthenticated, Internal",
    # The DALI drop-in: DALI's import lines with nvidia.dali replaced.
    "from conveyor.dali import fn, types, pipeline_def, Pipeline, tfrecord",
    "import conveyor.dali.fn as fn; import conveyor.dali.types as types; fn.decoders.image",
    "from conveyor.dali.pipeline import Pipeline, pipeline_def",
    "import conveyor.dali.tfrecord as tfrec; tfrec.FixedLenFeature; tfrec.VarLenFeature",
    "from conveyor.dali.plugin.pytorch import DALIClassificationIterator, "
    "DALIGenericIterator, DALIRaggedIterator, LastBatchPolicy, feed_ndarray",
    "from conveyor.dali.plugin.base_iterator import LastBatchPolicy",
    # The trainer adapters.
    "from conveyor.torch import ConveyorDataset, crop_mirror_normalize",
    "from conveyor.tf import ConveyorDataset",
    "from conveyor.jax import ConveyorIterator",
    "from conveyor.dali.plugin.jax import DALIGenericIterator, data_iterator",
    "from conveyor.dali.plugin.pytorch.experimental import proxy as dali_proxy",
    # The command line's entry point.
    "from conveyor.cli import main",
]


@pytest.mark.parametrize("statement", PUBLIC_IMPORTS)
def test_a_public_import_works_in_a_fresh_interpreter(statement: str) -> None:
    run = subprocess.run([sys.executable, "-c", statement], capture_output=True, text=True,
                         timeout=120, check=False)
    assert run.returncode == 0, f"{statement}\n{run.stderr[-2000:]}"


def test_the_public_face_lists_what_it_serves() -> None:
    import conveyor

    assert sorted(conveyor.__all__) == sorted(
        ["Checkpoint", "Client", "RemotePipeline", "TensorList", "TlsOptions", "__version__",
         "errors", "fn", "pipeline_def", "types"])
    for name in conveyor.__all__:
        assert getattr(conveyor, name) is not None, name
