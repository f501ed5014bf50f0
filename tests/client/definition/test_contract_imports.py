"""The definition contract imports no gRPC; the transport loads the first time it is used.

``from conveyor import fn, pipeline_def, types`` is what a pipeline definition and the engine
need: it must not pay for (or depend on) grpc. ``import conveyor`` alone loads none of its
modules (each public name loads its own on first use), so a process that needs one module
(a parallel external source's worker) pays for that one alone. Each check runs in a fresh
interpreter, since this test process has long imported everything.
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


def passes_in_a_fresh_interpreter(probe: str) -> None:
    """Run ``probe`` (which prints ``ok`` at its end) in a fresh interpreter; fail with its
    error output unless it printed ``ok`` alone."""
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.stdout.split() == ["ok"], done.stderr[-3000:]


@pytest.mark.parametrize("code", [
    "from conveyor import fn, pipeline_def, types",
    "from conveyor.dali import fn, types, pipeline_def",
    "import conveyor.dali.fn as fn, conveyor.dali.types as types\n"
    "from conveyor.dali.pipeline import Pipeline, pipeline_def",
    "import conveyor, conveyor.errors, conveyor.definition.spec,"
    " conveyor.definition.schemas.registry, conveyor.tensor_list",
    "from conveyor_server.engine.pipeline import Pipeline",
    "from conveyor_server import Pipeline",
])
def test_the_definition_contract_and_the_engine_load_no_grpc(code: str) -> None:
    loaded = loaded_after(code)
    grpc = sorted(m for m in loaded if m == "grpc" or m.startswith(("grpc.", "grpc_")))
    transport = sorted(m for m in loaded if m in {
        "conveyor.client", "conveyor.transport.connection", "conveyor.transport.channel",
        "conveyor.transport.credentials",
        "conveyor.remote.pipeline", "conveyor.remote.opening", "conveyor.transport.wire"})
    assert not grpc and not transport, f"{code!r} loaded {grpc + transport}"


def test_the_transport_loads_on_first_use() -> None:
    loaded = loaded_after("import conveyor\nconveyor.Client")
    assert {"grpc", "conveyor.client", "conveyor.transport.connection"} <= loaded


def test_the_transport_names_are_the_transport_modules_objects() -> None:
    from conveyor.client import Checkpoint, Client, RemotePipeline
    from conveyor.transport.credentials import TlsOptions

    assert (conveyor.Client, conveyor.RemotePipeline, conveyor.Checkpoint, conveyor.TlsOptions) \
        == (Client, RemotePipeline, Checkpoint, TlsOptions)
    assert {"Client", "TlsOptions", "fn"} <= set(dir(conveyor))
    assert set(conveyor.__all__) <= set(dir(conveyor))


def test_an_unknown_name_is_an_attribute_error_naming_it() -> None:
    with pytest.raises(AttributeError, match="'Clinet'"):
        _ = conveyor.Clinet


#: Where each public name of ``conveyor`` is defined (a module: the name is that module).
PUBLIC = {
    "Checkpoint": "conveyor.client", "Client": "conveyor.client",
    "RemotePipeline": "conveyor.client", "TensorList": "conveyor.tensor_list",
    "TlsOptions": "conveyor.transport.credentials", "pipeline_def": "conveyor.definition.decorator",
    "errors": "conveyor.errors", "fn": "conveyor.fn", "types": "conveyor.types",
}


def test_import_conveyor_loads_none_of_its_modules_nor_numpy_protobuf_or_grpc() -> None:
    loaded = loaded_after("import conveyor")
    heavy = sorted(m for m in loaded if m.startswith(("conveyor.", "numpy", "google", "grpc")))
    assert "conveyor" in loaded and not heavy, heavy


def test_every_public_name_resolves_to_its_modules_object_in_a_fresh_interpreter() -> None:
    probe = ("import importlib, conveyor\n"
             f"public = {PUBLIC!r}\n"
             "assert sorted(public) == sorted(set(conveyor.__all__) - {'__version__'})\n"
             "for name, module in public.items():\n"
             "    defined = importlib.import_module(module)\n"
             "    want = defined if name in ('errors', 'fn', 'types') else getattr(defined, name)\n"
             "    assert getattr(conveyor, name) is want, name\n"
             "ns = {}\n"
             "exec('from conveyor import *', ns)\n"
             "assert set(conveyor.__all__) <= set(ns), set(conveyor.__all__) - set(ns)\n"
             "print('ok')")
    passes_in_a_fresh_interpreter(probe)
    assert conveyor.__version__ == "0.1.0"
    assert set(conveyor.__all__) == {*PUBLIC, "__version__"}


def test_pipeline_def_stays_the_decorator_after_its_module_is_imported_first() -> None:
    """``conveyor.pipeline_def`` is the decorator whatever was imported before it: its
    module has another name (``conveyor.definition.decorator``), so the import system never
    binds a submodule over the public name."""
    probe = ("import conveyor, conveyor.definition.decorator, types\n"
             "from conveyor.definition.decorator import pipeline_def\n"
             "assert conveyor.pipeline_def is pipeline_def, conveyor.pipeline_def\n"
             "from conveyor import pipeline_def as again\n"
             "assert again is pipeline_def and not isinstance(again, types.ModuleType)\n"
             "print('ok')")
    passes_in_a_fresh_interpreter(probe)


def test_a_parallel_sources_worker_loads_only_what_it_runs() -> None:
    """The worker process imports its module, then the sources' modules: of ``conveyor``
    only the errors, the source helpers and the generated messages, and no gRPC or
    OpenCV (it was the whole package, definition contract included: ~0.2 s a worker)."""
    loaded = loaded_after("import conveyor_server.engine.stages.source_worker")
    ours = {m for m in loaded if m.startswith("conveyor.") and not m.startswith("conveyor.v1")}
    # (``conveyor.definition`` is the room's package: its ``__init__`` holds its docstring.)
    assert ours == {"conveyor.errors", "conveyor.definition", "conveyor.definition.external_source",
                    "conveyor.definition.source_closures"}
    others = sorted(m for m in loaded if m.startswith(("grpc", "cv2", "torch", "redis")))
    assert not others, others
