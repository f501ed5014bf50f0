"""Discovery: every operator, reader, GPU planner and behaviour probe registers itself
when its module is imported, and ``load()`` imports them all.

The registries hold only their contracts and maps (``ops/registry.py`` the builders,
``cuda/ops.py`` the GPU planners, ``readers/build.py`` the readers,
``behaviour/probe_set.py`` the probes); nothing in them names a module. ``load()`` imports
every module of the packages below, whatever it is called, so a new operator is one new
module (and its schema): no list here or elsewhere names it. The plan and the behaviour
measurement call ``load()`` before they look anything up.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil

#: The packages whose modules register operators, readers, planners and probes.
PACKAGES = (
    "conveyor_server.engine.ops",
    "conveyor_server.engine.readers",
    "conveyor_server.engine.stages",
)


@functools.cache
def load() -> tuple[str, ...]:
    """Import every module of ``PACKAGES`` and of their subpackages (once); the names of
    those imported."""
    names: list[str] = []
    for package_name in PACKAGES:
        package = importlib.import_module(package_name)
        for module in pkgutil.walk_packages(package.__path__, prefix=f"{package_name}."):
            importlib.import_module(module.name)
            if not module.ispkg:
                names.append(module.name)
    return tuple(names)
