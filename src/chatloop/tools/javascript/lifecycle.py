r"""What concerns every sandbox of this process at once: a SnapStart snapshot (suspend them all: no child process in
it, then resume) and a server stopped by a signal (close them all: no process or work directory left behind).

Each sandbox joins when it is made (``join``, which says whether it starts suspended) and leaves when it is closed
(``leave``); this module knows them only as ``Member``\ s, so it imports nothing of the sandbox.

Usage::

    suspended = join(self)          # a sandbox, as it is made
    leave(self)                     # ... as it is closed
    suspend_all()                   # before the snapshot
    resume_all()                    # after each restore
    close_all_on_signals()          # at import of the Lambda entry point
"""

from __future__ import annotations

import signal
import threading
import weakref
from collections.abc import Callable
from types import FrameType
from typing import Protocol


class Member(Protocol):
    """What this module asks of a sandbox (``sandbox.JavaScriptSandbox``)."""

    def suspend(self) -> None: ...
    def resume(self) -> None: ...
    def close(self) -> None: ...


# Every sandbox of this process, for what concerns them all: a SnapStart snapshot (no child process in it) and a
# server stopped by a signal (no work directory left behind).
_LIVE: weakref.WeakSet[Member] = weakref.WeakSet()
"""Each sandbox joins when it is made and leaves when it is closed."""
_SUSPENDED = threading.Event()
"""Set between ``suspend_all()`` and ``resume_all()``: a sandbox created meanwhile starts suspended."""


def join(sandbox: Member) -> bool:
    """Count ``sandbox`` among this process's sandboxes; True when it must start suspended (a snapshot is being
    prepared: between ``suspend_all()`` and ``resume_all()``)."""
    _LIVE.add(sandbox)
    return _SUSPENDED.is_set()


def leave(sandbox: Member) -> None:
    """``sandbox`` is closed: nothing concerns it any more."""
    _LIVE.discard(sandbox)


def live() -> list[Member]:
    """The sandboxes of this process that are not closed."""
    return list(_LIVE)


def suspend_all() -> None:
    """``suspend()`` every sandbox of this process, and those created until ``resume_all()``."""
    _SUSPENDED.set()
    for sandbox in list(_LIVE):
        sandbox.suspend()


def resume_all() -> None:
    """``resume()`` every sandbox of this process: each starts its spare."""
    _SUSPENDED.clear()
    for sandbox in list(_LIVE):
        sandbox.resume()


def close_all() -> None:
    """``close()`` every sandbox of this process: no child process, no work directory left."""
    for sandbox in list(_LIVE):
        sandbox.close()


def close_all_on_signals(signals: tuple[int, ...] = (signal.SIGTERM, signal.SIGINT)) -> list[int]:
    """Close every sandbox when the process is stopped by one of ``signals``, then die of that signal as before.

    Only where nothing else handles the signal (its disposition is the default, or Python's KeyboardInterrupt for
    SIGINT): a server that handles it (uvicorn shuts down gracefully, then re-raises it with the default action,
    which skips ``atexit``) closes the sandboxes itself, from its shutdown. Call from the main thread. Returns the
    signals it took over.

    Usage::

        close_all_on_signals()          # at import of the Lambda entry point
    """
    if threading.current_thread() is not threading.main_thread():
        return []
    taken = []
    for number in signals:
        previous = signal.getsignal(number)
        if previous not in (signal.SIG_DFL, signal.default_int_handler):
            continue

        def on_signal(
            received: int,
            frame: FrameType | None,
            previous: Callable[[int, FrameType | None], object] | int | None = previous,
        ) -> None:
            close_all()
            signal.signal(received, previous)
            if callable(previous):  # SIGINT: KeyboardInterrupt, as before
                previous(received, frame)
            else:
                signal.raise_signal(received)

        signal.signal(number, on_signal)
        taken.append(number)
    return taken
