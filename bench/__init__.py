"""Benchmarks. The engine package is imported first: it chooses OpenCV's CPU code paths
before anything loads OpenCV, as a server does (``conveyor_server.engine.identity.cpu_paths``), so
in-process figures and bytes are those of the servers the benchmarks start."""

import conveyor_server.engine  # noqa: F401
