"""The definition contract imports no gRPC; the transport loads the first time it is used.

``from conveyor import fn, pipeline_def, types`` is what a pipeline definition and the engine
need: it must not pay for (or depend on) grpc. Each check runs in a fresh interpreter, since
this test process has long imported everything.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

import conveyor


def loaded_after(code: str) -> set[str]:
    """The top-level packages loaded in a fresh interpreter after running ``code``."""
    probe = f"{code}\nimport sys\nprint(' '.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True,
                         text=True, timeout=120).stdout
    return set(out.split())


@pytest.mark.parametrize("code", [
    "from conveyor import fn, pipeline_def, types",
    "from conveyor.dali import fn, types, pipeline_def",
    "import conveyor.dali.fn as fn, conveyor.dali.types as types\n"
    "from conveyor.dali.pipeline import Pipeline, pipeline_def",
    "import conveyor, conveyor.errors, conveyor.spec, conveyor.schema, conveyor.tensor_list",
    "from conveyor_server.engine.pipeline import Pipeline",
    "from conveyor_server import Pipeline",
])
def test_the_definition_contract_and_the_engine_load_no_grpc(code: str) -> None:
    loaded = loaded_after(code)
    grpc = sorted(m for m in loaded if m == "grpc" or m.startswith(("grpc.", "grpc_")))
    transport = sorted(m for m in loaded if m in {
        "conveyor.client", "conveyor.connection", "conveyor.channel", "conveyor.credentials",
        "conveyor.remote", "conveyor.opening", "conveyor.wire"})
    assert not grpc and not transport, f"{code!r} loaded {grpc + transport}"


def test_the_transport_loads_on_first_use() -> None:
    loaded = loaded_after("import conveyor\nconveyor.Client")
    assert {"grpc", "conveyor.client", "conveyor.connection"} <= loaded


def test_the_transport_names_are_the_transport_modules_objects() -> None:
    from conveyor.client import Checkpoint, Client, RemotePipeline
    from conveyor.credentials import TlsOptions

    assert (conveyor.Client, conveyor.RemotePipeline, conveyor.Checkpoint, conveyor.TlsOptions) \
        == (Client, RemotePipeline, Checkpoint, TlsOptions)
    assert {"Client", "TlsOptions", "fn"} <= set(dir(conveyor))
    assert set(conveyor.__all__) <= set(dir(conveyor))


def test_an_unknown_name_is_an_attribute_error_naming_it() -> None:
    with pytest.raises(AttributeError, match="'Clinet'"):
        _ = conveyor.Clinet
