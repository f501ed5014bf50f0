"""The server's rooms and what each may import.

``engine/`` (spec -> plan -> ops -> batches -> state) imports no other room; ``store/``
(Redis) imports no other room either; ``service/`` (gRPC) may import ``engine/`` and
``store/``; ``app/`` assembles everything. No room imports ``demo/`` (the demo and the
helpers that start servers for it, the tests and the benchmarks).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "server" / "conveyor_server"
ROOMS = ("engine", "service", "store", "app", "demo")
ALLOWED = {
    "engine": set(),
    "store": set(),
    "service": {"engine", "store"},
    "app": {"engine", "store", "service"},
    "demo": {"engine", "store", "service", "app"},
}


def imports(path: Path) -> list[tuple[list[str], int]]:
    """Every absolute import in a module (anywhere in it, functions and annotations
    included): the dotted name's parts (``from a.b import c``: ``a.b.c``) and its line."""
    found: list[tuple[list[str], int]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{a.name}" for a in node.names]
        else:
            continue
        found.extend((name.split("."), node.lineno) for name in names)
    return found


def imported_below(path: Path, prefix: list[str]) -> dict[str, int]:
    """The parts just below ``prefix`` (a package's rooms and modules) a module imports ->
    a line doing so."""
    found: dict[str, int] = {}
    for parts, line in imports(path):
        if parts[:len(prefix)] == prefix and len(parts) > len(prefix):
            found.setdefault(parts[len(prefix)], line)
    return found


def imported_rooms(path: Path) -> dict[str, int]:
    """The server's rooms a module imports -> a line doing so."""
    return {room: line for room, line in imported_below(path, ["conveyor_server"]).items()
            if room in ROOMS}


@pytest.mark.parametrize("room", ROOMS)
def test_each_room_imports_only_the_rooms_below_it(room: str) -> None:
    modules = sorted((PACKAGE / room).rglob("*.py"))
    assert modules, f"no modules in {room}/"
    wrong = [f"{m.relative_to(PACKAGE)}:{line} imports {other}/"
             for m in modules for other, line in imported_rooms(m).items()
             if other != room and other not in ALLOWED[room]]
    assert not wrong, "\n".join(wrong)


def test_the_import_check_sees_nested_and_from_imports(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("from conveyor_server import store\n"
                      "def f():\n    import conveyor_server.service.server\n"
                      "from conveyor_server.app.config import load\n")
    assert imported_rooms(module) == {"store": 1, "service": 3, "app": 4}


def test_every_module_outside_the_rooms_is_the_package_itself() -> None:
    loose = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert loose == ["__init__.py"]


def test_each_room_says_what_it_holds_and_may_import() -> None:
    for room in ROOMS:
        doc = ast.get_docstring(ast.parse((PACKAGE / room / "__init__.py").read_text()))
        assert doc and "imports:" in doc.lower(), \
            f"{room}/__init__.py needs a docstring saying what it holds and what it may import"


# -- the engine's rooms ----------------------------------------------------------------------

ENGINE = PACKAGE / "engine"
#: The engine's rooms and the rooms each may import. Every room may also import the two
#: foundations at the engine's top (``FOUNDATIONS``); the run loop at the top imports all.
ENGINE_ALLOWED: dict[str, set[str]] = {
    "admission": set(),
    "device": set(),
    "data": {"admission"},
    "ops": {"admission", "device"},
    "stages": {"ops"},
    "readers": {"admission", "data", "ops", "stages"},
    "identity": {"ops", "device"},
}
FOUNDATIONS = {"keyed_random", "catalog"}
#: The run loop: the modules at the engine's top, foundations included.
RUN_LOOP = {"batch_queue", "batch_work", "catalog", "checkpoint_writer", "gpu_staging",
            "keyed_random", "pipeline", "plan", "segments", "staging"}


def engine_imports(path: Path) -> dict[str, int]:
    """The engine rooms and top-level modules a module imports -> a line doing so."""
    return imported_below(path, ["conveyor_server", "engine"])


def test_the_engine_top_holds_the_run_loop_and_the_rooms() -> None:
    modules = {p.stem for p in ENGINE.glob("*.py")} - {"__init__"}
    rooms = {p.parent.name for p in ENGINE.glob("*/__init__.py")}
    assert modules == RUN_LOOP
    assert rooms == set(ENGINE_ALLOWED)


@pytest.mark.parametrize("room", sorted(ENGINE_ALLOWED))
def test_each_engine_room_imports_only_what_it_declares(room: str) -> None:
    allowed = ENGINE_ALLOWED[room] | FOUNDATIONS | {room}
    wrong = [f"engine/{m.relative_to(ENGINE)}:{line} imports engine/{other}"
             for m in sorted((ENGINE / room).rglob("*.py"))
             for other, line in engine_imports(m).items() if other not in allowed]
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("room", sorted(ENGINE_ALLOWED))
def test_each_engine_room_says_what_it_holds_and_may_import(room: str) -> None:
    doc = ast.get_docstring(ast.parse((ENGINE / room / "__init__.py").read_text())) or ""
    assert "Imports:" in doc, f"engine/{room}/__init__.py: say what it may import"
    said = doc[doc.index("Imports:"):]
    for other in ENGINE_ALLOWED[room]:
        assert f"``{other}``" in said, f"engine/{room}/__init__.py: its Imports: omits {other}"
    unsaid = {r for r in ENGINE_ALLOWED if f"``{r}``" in said} - ENGINE_ALLOWED[room]
    assert not unsaid, f"engine/{room}/__init__.py names rooms it may not import: {unsaid}"
    assert len(doc.split("Imports:")[0].split()) > 10, f"engine/{room}: say what it holds"


def test_the_engine_room_check_sees_what_a_module_imports(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("from conveyor_server.engine import keyed_random\n"
                      "def f():\n    from conveyor_server.engine.data.roots import DataRoots\n"
                      "import conveyor_server.engine.ops.registry\n")
    assert engine_imports(module) == {"keyed_random": 1, "data": 3, "ops": 4}


def test_the_engine_top_holds_at_most_ten_modules() -> None:
    assert len(RUN_LOOP) <= 10


# -- the client's rooms ----------------------------------------------------------------------

CLIENT = ROOT / "client" / "conveyor"
#: The client's public face: the modules at its top (``__init__`` included).
CLIENT_FACE = {"__init__", "errors", "tensor_list", "types", "fn", "client", "cli"}
#: Each part of the client (a room, or a module of the face) -> the parts it may import.
#: ``v1`` (the generated messages) may be imported by every part.
CLIENT_ALLOWED: dict[str, set[str]] = {
    "errors": set(),
    "tensor_list": set(),
    "definition": {"errors", "tensor_list"},
    "types": {"definition"},
    "fn": {"definition", "errors"},
    "transport": {"errors", "tensor_list"},
    "remote": {"transport", "definition", "errors", "tensor_list"},
    "client": {"remote", "transport", "definition", "errors"},
    "dali": {"definition", "errors", "fn", "tensor_list", "types", "client", "remote",
             "transport", "torch", "jax"},
    "jax": {"client", "remote", "transport", "definition", "errors", "tensor_list"},
    "torch": {"client", "remote", "transport", "definition", "errors", "tensor_list"},
    "tf": {"client", "remote", "transport", "definition", "errors", "tensor_list"},
    "cli": {"client", "remote", "transport", "definition", "errors", "tensor_list"},
}
CLIENT_ROOMS = ("definition", "transport", "remote", "dali", "torch", "tf", "jax")


def client_parts_imported(path: Path) -> dict[str, int]:
    """The client's parts a module imports -> a line doing so."""
    return imported_below(path, ["conveyor"])


def test_the_client_top_holds_its_public_face_and_rooms() -> None:
    modules = {p.stem for p in CLIENT.glob("*.py")}
    rooms = {p.parent.name for p in CLIENT.glob("*/__init__.py")} - {"v1"}
    assert modules == CLIENT_FACE
    assert len(modules) <= 12
    assert rooms == set(CLIENT_ROOMS)


@pytest.mark.parametrize("part", sorted(CLIENT_ALLOWED))
def test_each_client_part_imports_only_what_it_may(part: str) -> None:
    files = sorted((CLIENT / part).rglob("*.py")) if part in CLIENT_ROOMS \
        else [CLIENT / f"{part}.py"]
    allowed = CLIENT_ALLOWED[part] | {part, "v1"}
    wrong = [f"{m.relative_to(CLIENT)}:{line} imports conveyor.{other}"
             for m in files for other, line in client_parts_imported(m).items()
             if other not in allowed]
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("room", ("definition", "definition/schemas", "transport", "remote"))
def test_each_client_room_says_what_it_holds_and_may_import(room: str) -> None:
    doc = ast.get_docstring(ast.parse((CLIENT / room / "__init__.py").read_text())) or ""
    assert "Imports:" in doc, f"client/conveyor/{room}/__init__.py: say what it may import"
    assert len(doc.split("Imports:")[0].split()) > 10, f"{room}: say what it holds"


def test_the_definition_contract_never_imports_grpc() -> None:
    wrong = [f"{m.relative_to(CLIENT)}:{line}"
             for m in sorted((CLIENT / "definition").rglob("*.py"))
             for parts, line in imports(m) if parts[0] in ("grpc", "grpc_status")]
    assert not wrong, wrong


def test_the_client_room_check_sees_what_a_module_imports(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("from conveyor import errors\n"
                      "def f():\n    from conveyor.remote.cluster import Cluster\n"
                      "import conveyor.transport.wire\n")
    assert client_parts_imported(module) == {"errors": 1, "remote": 3, "transport": 4}
