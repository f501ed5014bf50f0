"""The server's compiled parts, built against Python's stable ABI (one build for 3.11 and
later): the area resize kernel (``engine/ops/geometry/area_kernel.c``), the batch header
walk of the decoders (``engine/ops/decode/image_headers.c``) and the batch file reader
(``engine/data/batch_read.c``).

All are optional: where no C compiler is found the install goes on without them, ``resize``
computes the same bytes with OpenCV, the decoders read headers in Python and a batch's files
are read one by one in Python, more slowly (``area_resize.KERNEL``, ``batch_headers.WALK``
and ``batch_read.READER`` say which runs). The area kernel's flags
keep every float32 operation as written (no fused multiply-add, no reassociation), which is
what makes its bytes OpenCV's and the same on every CPU; they come after any CFLAGS of the
environment, so those cannot loosen them.
"""

from setuptools import Extension, setup

EXACT_FLOATS = ["-O3", "-fno-fast-math", "-ffp-contract=off"]

setup(
    ext_modules=[
        Extension(
            "conveyor_server.engine.ops.geometry._area_kernel",
            sources=["conveyor_server/engine/ops/geometry/area_kernel.c"],
            extra_compile_args=EXACT_FLOATS,
            define_macros=[("Py_LIMITED_API", "0x030B0000")],
            py_limited_api=True,
            optional=True,
        ),
        Extension(
            "conveyor_server.engine.ops.decode._image_headers",
            sources=["conveyor_server/engine/ops/decode/image_headers.c"],
            extra_compile_args=["-O2"],
            define_macros=[("Py_LIMITED_API", "0x030B0000")],
            py_limited_api=True,
            optional=True,
        ),
        Extension(
            "conveyor_server.engine.data._batch_read",
            sources=["conveyor_server/engine/data/batch_read.c"],
            define_macros=[("Py_LIMITED_API", "0x030B0000")],
            py_limited_api=True,
            optional=True,
        ),
    ],
    options={"bdist_wheel": {"py_limited_api": "cp311"}},
)
