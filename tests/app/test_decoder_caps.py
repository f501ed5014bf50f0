"""OpenCV's own pixel cap is the server's ``limits.max_image_pixels``: the server sets it
before anything loads OpenCV, so an image in a format the header parser does not read is
still refused before OpenCV decodes it."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest

from conveyor import errors, fn, pipeline_def, types
from conveyor_server import Pipeline
from conveyor_server.app.decoder_caps import OPENCV_PIXELS, cap_decoders
from conveyor_server.engine.admission.limits import EngineLimits
from conveyor_server.engine.ops.decode.image_header import read_size
from tests.support.image_files import opencv
from tests.support.images import make_image
from tests.support.servers import Start, client


def test_the_server_loads_opencv_only_once_its_cap_is_set() -> None:
    for module in ("conveyor_server", "conveyor_server.app.main"):
        done = subprocess.run(
            [sys.executable, "-c", f"import sys, {module}; print('cv2' in sys.modules)"],
            capture_output=True, text=True, timeout=60, check=True)
        assert done.stdout.strip() == "False", module
    done = subprocess.run(  # and Pipeline is still there, loaded when first used
        [sys.executable, "-c", "from conveyor_server import Pipeline; print(Pipeline.__name__)"],
        capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "Pipeline"


def test_the_cap_cannot_be_set_once_opencv_is_loaded(caplog: pytest.LogCaptureFixture) -> None:
    env: dict[str, str] = {}
    with caplog.at_level(logging.WARNING):
        assert not cap_decoders(1234, env)  # this process imported cv2 long ago
    assert env == {OPENCV_PIXELS: "1234"} and "keeps its own cap" in caplog.text


@pipeline_def(batch_size=2, num_threads=1, seed=4)
def decoding(root: str) -> Any:
    files, labels = fn.readers.file(file_root=root, file_filters=["*.sr", "*.hdr"])
    return fn.decoders.image(files, output_type=types.RGB), labels


@pytest.fixture
def unparsed(tmp_path: Path) -> Path:
    """Images of 100x100 pixels in formats OpenCV reads and the header parser does not:
    Sun raster and Radiance HDR."""
    folder = tmp_path / "root" / "imgs" / "class_0"
    folder.mkdir(parents=True)
    image = make_image(3, 100, 100)
    for ext in (".sr", ".hdr"):
        data = opencv(ext, image)
        decoded = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
        assert read_size(data) is None and decoded is not None
        assert decoded.shape == (100, 100, 3)
        (folder / f"a{ext}").write_bytes(data)
    return tmp_path / "root"


def test_a_format_the_parser_does_not_read_is_capped_by_opencv_in_the_server(
        start_server: Start, unparsed: Path) -> None:
    spec = decoding(str(unparsed / "imgs"))
    # In a process without the cap, OpenCV decodes them; the limit refuses them after.
    with Pipeline(spec, limits=EngineLimits(max_image_pixels=1000)) as local, \
            pytest.raises(errors.ResourceExhausted, match="the decoded unknown image is "
                                                          "100x100 = 10,000 pixels"):
        local.run()
    server = start_server(roots=[unparsed], env={"CONVEYOR_LIMITS_MAX_IMAGE_PIXELS": "1000"})
    with client(server) as c:
        pipe = c.create("capped", spec)
        with pytest.raises(errors.ResourceExhausted,
                           match=r"on '<root 0>/imgs/class_0/a\.(hdr|sr)': the image is above "
                                 r"OpenCV's pixel cap \(OPENCV_IO_MAX_IMAGE_PIXELS = 1000, "
                                 r"which a server sets from limits\.max_image_pixels\): it "
                                 r"was not decoded"):
            pipe.run()
