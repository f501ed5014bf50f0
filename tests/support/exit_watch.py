"""A pytest plugin for a test process that must exit promptly once its tests end (the
TensorFlow adapter's, ``test_tf_adapter.py``): when the session ends it arms faulthandler,
so that a process still alive ``WATCH_S`` seconds later writes every thread's stack to
stderr. A process that stalls on its way out then says where."""

from __future__ import annotations

import faulthandler

import pytest

WATCH_S = 15


def pytest_unconfigure(config: pytest.Config) -> None:
    faulthandler.dump_traceback_later(WATCH_S, exit=False, file=2)  # the process's stderr
