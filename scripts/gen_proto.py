"""Generate the Python modules of the protos under proto/.

Usage: python scripts/gen_proto.py [OUT_DIR]
Conveyor's own API (proto/conveyor/v1) goes into client/ (or OUT_DIR): the proto path is
the package path, so proto/conveyor/v1/x.proto becomes OUT_DIR/conveyor/v1/x_pb2.py and
imports as conveyor.v1.x_pb2 with no patching.

The record formats the server's readers parse (proto/caffe, proto/caffe2, proto/tensorflow:
messages with their publishers' field numbers, no imports, no services) go into the
server's engine, in FORMATS_DIR (OUT_DIR/formats when OUT_DIR is given), as caffe_pb2.py,
caffe2_pb2.py and example_pb2.py.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "proto"
#: Folders under proto/ holding record formats rather than Conveyor's API.
FORMATS = ("caffe", "caffe2", "tensorflow")
FORMATS_DIR = ROOT / "server" / "conveyor_server" / "engine" / "readers" / "formats"


def _protoc(out_dir: Path, protos: list[str], grpc: bool) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    args = ["protoc", f"-I{PROTO_ROOT}", f"--python_out={out_dir}", f"--pyi_out={out_dir}",
            *([f"--grpc_python_out={out_dir}"] if grpc else []), *protos]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")


def generate(out_dir: Path, formats_dir: Path | None = None) -> None:
    """API modules into ``out_dir``; format modules into ``formats_dir`` (by default
    ``out_dir/formats``)."""
    formats_dir = formats_dir or out_dir / "formats"
    protos = sorted(str(p.relative_to(PROTO_ROOT)) for p in PROTO_ROOT.rglob("*.proto"))
    formats = [p for p in protos if p.split("/", 1)[0] in FORMATS]
    _protoc(out_dir, [p for p in protos if p not in formats], grpc=True)
    with tempfile.TemporaryDirectory() as tmp:
        _protoc(Path(tmp), formats, grpc=False)
        formats_dir.mkdir(parents=True, exist_ok=True)
        for proto in formats:
            stem = proto[:-len(".proto")]
            for suffix in ("_pb2.py", "_pb2.pyi"):
                made = Path(tmp, stem + suffix)
                shutil.copyfile(made, formats_dir / made.name)


if __name__ == "__main__":
    if len(sys.argv) > 1:
        generate(Path(sys.argv[1]))
    else:
        generate(ROOT / "client", FORMATS_DIR)
