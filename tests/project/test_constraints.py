"""The pinned runtime dependencies (server/constraints.txt): complete, within the
pyproject specifiers, used by the image and by the Makefile, and installed here. Output
bytes depend on these versions (numpy, OpenCV, libjpeg-turbo builds)."""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterator
from importlib import metadata

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from tests.project.test_deploy import ROOT, dockerfile_stages

# ---- pinned runtime dependencies (server/constraints.txt) ------------------------------

CONSTRAINTS = ROOT / "server" / "constraints.txt"
# This repository's own distributions: installed from its source, not pinned.
OWN = {"conveyor", "conveyor-server"}
# Runtime dependencies that neither image installs, so they are not pinned (the constraints
# file's header says why): redis needs async-timeout only on Python < 3.11.3.
NOT_PINNED = {"async-timeout"}
REINSTALL = ("run `make` again to reinstall .venv at the pinned versions (if it says nothing "
             "is to be done: `rm .venv/.installed; make`)")


def constraint_pins() -> dict[str, Version]:
    """server/constraints.txt as {canonical name: version}; every line must be name==version."""
    pins: dict[str, Version] = {}
    for number, raw in enumerate(CONSTRAINTS.read_text().splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        where = f"server/constraints.txt:{number}: {line!r}"
        req = Requirement(line)
        specs = list(req.specifier)
        assert (len(specs) == 1 and specs[0].operator == "==" and "*" not in specs[0].version
                and not req.extras and req.marker is None and req.url is None), \
            f"{where} is not an exact pin NAME==VERSION"
        name = canonicalize_name(req.name)
        assert name not in pins, f"{where} pins {name} a second time"
        assert name not in OWN, f"{where}: this repository's own distribution"
        pins[name] = Version(specs[0].version)
    assert pins, "server/constraints.txt pins nothing"
    return pins


def pyproject_requirements() -> Iterator[tuple[str, Requirement]]:
    """The runtime `dependencies` of client/ and server/pyproject.toml (no extras)."""
    for dist in ("client", "server"):
        meta = tomllib.loads((ROOT / dist / "pyproject.toml").read_text())
        for spec in meta["project"]["dependencies"]:
            yield f"{dist}/pyproject.toml", Requirement(spec)


def test_pyproject_dependencies_are_pinned_within_their_specifiers() -> None:
    pins = constraint_pins()
    problems = []
    for where, req in pyproject_requirements():
        name = canonicalize_name(req.name)
        if name in OWN:
            continue
        if name not in pins:
            problems.append(f"{where}: {req} has no pin (NAME==VERSION) in server/constraints.txt")
        elif not req.specifier.contains(pins[name], prereleases=True):
            problems.append(f"{where}: {req} does not allow the pin {name}=={pins[name]}")
    assert not problems, "\n".join(problems)


def runtime_closure() -> dict[str, list[Requirement]]:
    """Every distribution that the installed client and server need at runtime (no extras,
    markers evaluated for this interpreter), with the requirements naming it."""
    needed: dict[str, list[Requirement]] = {}
    todo = sorted(OWN)
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            pytest.fail(f"{name} is not installed: {REINSTALL}")
        for spec in requires:
            req = Requirement(spec)
            if req.marker is not None and not req.marker.evaluate({"extra": ""}):
                continue
            dep = canonicalize_name(req.name)
            needed.setdefault(dep, []).append(req)
            todo.append(dep)
    return needed


def test_constraints_cover_the_whole_runtime_closure() -> None:
    """Transitive runtime dependencies are pinned too (a new one appears when a pinned
    package is bumped), every pin satisfies what requires it, and no pin is stale."""
    pins = constraint_pins()
    closure = {name: reqs for name, reqs in runtime_closure().items() if name not in OWN}
    problems = [f"{name} (required as {', '.join(map(str, reqs))}) has no pin"
                for name, reqs in sorted(closure.items())
                if name not in pins and name not in NOT_PINNED]
    problems += [f"{name}=={pins[name]} does not satisfy {req}"
                 for name, reqs in sorted(closure.items()) if name in pins
                 for req in reqs if not req.specifier.contains(pins[name], prereleases=True)]
    problems += [f"{name}=={pins[name]} is pinned but nothing needs it at runtime"
                 for name in sorted(set(pins) - set(closure))]
    assert not problems, "server/constraints.txt:\n" + "\n".join(problems)


def test_installed_versions_equal_the_pins() -> None:
    """The test environment runs what the image runs (the Makefile installs with -c)."""
    wrong = []
    for name, pin in sorted(constraint_pins().items()):
        try:
            installed = Version(metadata.version(name))
        except metadata.PackageNotFoundError:
            wrong.append(f"{name}: not installed, pinned {pin}")
            continue
        if installed != pin:
            wrong.append(f"{name}: installed {installed}, pinned {pin}")
    assert not wrong, ("the environment differs from server/constraints.txt:\n"
                       + "\n".join(wrong) + f"\n{REINSTALL}")


def mount_options(run: str) -> Iterator[dict[str, str]]:
    for mount in re.findall(r"--mount=(\S+)", run):
        options = dict(kv.split("=", 1) if "=" in kv else (kv, "") for kv in mount.split(","))
        for key, alias in (("source", "src"), ("target", "dst"), ("target", "destination")):
            if alias in options:
                options[key] = options.pop(alias)
        yield options


def test_dockerfile_runtime_stages_install_with_the_constraints() -> None:
    stages = dockerfile_stages()
    for name in ("gpu", "cpu"):
        copied = {words[-1] for kw, rest in stages[name] if kw == "COPY"
                  for words in [rest.split()] if "server/constraints.txt" in words[:-1]}
        installs = [rest for kw, rest in stages[name] if kw == "RUN" and "pip install" in rest]
        assert installs, f"{name}: no pip install"
        for run in installs:
            mounted = {o["target"] for o in mount_options(run) if "from" not in o
                       and o.get("source") == "server/constraints.txt" and "target" in o}
            # Only the pip commands' options (a later `python -c "..."` is no constraint).
            pip_commands = [part for part in run.split("&&") if "pip install" in part]
            used = {path.strip("'\"") for part in pip_commands for path in
                    re.findall(r"\s(?:-c|--constraint)(?:\s+|=)(\S+)", part)}
            assert used and used <= copied | mounted, \
                f"{name}: `{run}` must install with -c server/constraints.txt (COPY or bind-mount)"


def test_makefile_installs_with_the_constraints() -> None:
    text = (ROOT / "Makefile").read_text()
    rule = re.search(r"^\$\(STAMP\):(.*)\n((?:\t.*\n)+)", text, re.MULTILINE)
    assert rule, "Makefile: no $(STAMP) rule"
    assert "server/constraints.txt" in rule[1].split(), "the install must rerun when it changes"
    installs = [line for line in rule[2].splitlines() if "./server" in line]
    assert installs, "Makefile: the $(STAMP) rule installs no ./server"
    assert all(" install -c server/constraints.txt " in line for line in installs), \
        f"Makefile: install with -c server/constraints.txt (as the image does): {installs}"


