"""A lock held from the interpreter's last ``atexit`` hook on, as a stopped thread holds it.

After the ``atexit`` hooks, Python stops every daemon thread where it stands, gRPC's
included: a thread stopped inside its call's lock (while it sends an acknowledgement, or
handles the event of one) holds that lock forever, and whatever takes it afterwards (a
finaliser that cancels the call) waits forever. ``hold_after_the_exit_hooks`` makes that
happen every time instead of by chance. Its thread runs in this module, not in the
script's ``__main__``: a thread's frame keeps its globals alive, and with them whatever
the script kept for the interpreter's teardown to finalise.
"""

from __future__ import annotations

import atexit
import sys
import threading
from typing import Any


def hold_after_the_exit_hooks(lock: list[Any]) -> None:
    """From the last ``atexit`` hook on, a daemon thread holds ``lock[0]`` (put there
    before the exit) and never lets go. Registered before ``conveyor.client`` registers
    its own hook, so that it runs after it (``atexit`` runs the last registered first)."""
    assert "conveyor.client" not in sys.modules, "register this before importing the client"
    take, held = threading.Event(), threading.Event()

    def holder() -> None:
        take.wait()
        lock[0].acquire()
        held.set()
        threading.Event().wait()  # never lets go

    def last_hook() -> None:
        take.set()
        assert held.wait(10), "the lock stayed taken at exit"

    threading.Thread(target=holder, daemon=True, name="holds a lock at exit").start()
    atexit.register(last_hook)
