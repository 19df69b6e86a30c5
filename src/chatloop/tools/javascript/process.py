"""The sandbox's child processes at the operating-system level: reading their pipes up to a marker, a deadline or a
byte limit; their CPU time; killing a whole process group and reaping it.

Usage::

    ready = read_until(process, b"R\\n", time.monotonic() + 10, limit=4096)
    if not ready.stdout.startswith(b"R\\n"):   # not ready in time: gone, with its whole group
        kill(process)
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field


@dataclass
class Read:
    stdout: bytearray = field(default_factory=bytearray)
    stderr: bytearray = field(default_factory=bytearray)
    line: bytes | None = None
    rest: bytes = b""
    """What came after the line, in the same reads."""
    timed_out: bool = False
    overflow: bool = False
    stopped: bool = False


STOP_POLL_SECONDS = 0.05
"""How often a run that can be stopped looks at its stop flag."""


def read_until(
    process: subprocess.Popen[bytes],
    marker: bytes,
    deadline: float,
    *,
    limit: int,
    line_after: bool = False,
    stop: threading.Event | None = None,
) -> Read:
    """Read stdout/stderr until ``marker`` (and, with ``line_after``, the rest of its line), EOF, the deadline,
    or ``limit`` bytes. Uses raw reads on the pipes so nothing is left buffered in Python."""
    out = Read()
    streams = {process.stdout.fileno(): "stdout", process.stderr.fileno(): "stderr"}  # type: ignore[union-attr]
    with selectors.DefaultSelector() as selector:
        for fd in streams:
            selector.register(fd, selectors.EVENT_READ)
        open_fds = set(streams)
        while open_fds:
            left = deadline - time.monotonic()
            if left <= 0:
                out.timed_out = True
                return out
            if stop is not None:
                if stop.is_set():
                    out.stopped = True
                    return out
                left = min(left, STOP_POLL_SECONDS)
            for key, _ in selector.select(timeout=left):
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    selector.unregister(key.fd)
                    open_fds.discard(key.fd)
                    continue
                name = streams[key.fd]
                # Appended in place: a child that trickles single bytes must not cost O(n^2) copying.
                (out.stdout if name == "stdout" else out.stderr).extend(chunk)
                if len(out.stdout) + len(out.stderr) > limit:
                    out.overflow = True
                    return out
                if name != "stdout":
                    continue
                if not line_after and out.stdout.startswith(marker):
                    return out
                if line_after:
                    at = out.stdout.find(marker)
                    if at >= 0:
                        end = out.stdout.find(b"\n", at)
                        if end >= 0:
                            out.line = bytes(out.stdout[at + len(marker) : end])
                            out.rest = bytes(out.stdout[end + 1 :])
                            return out
    return out


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> int:
    """CPU time (user + system, whole seconds rounded up) a process has used so far, from /proc."""
    with open(f"/proc/{pid}/stat", "rb") as stat:
        fields = stat.read().rsplit(b")", 1)[1].split()
    return -(-(int(fields[11]) + int(fields[12])) // CLOCK_TICKS)


def cpu_ms(pid: int) -> float | None:
    """CPU time (user + system, every thread's, the ended ones' included, in milliseconds at the clock tick's
    resolution: 10 ms) a process has used so far; None when it cannot be read (the process is gone). Per-thread
    counters are finer, but a run's worker thread has often ended, and taken its counter with it, by the time the
    result is read."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            fields = stat.read().rsplit(b")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) * 1000 / CLOCK_TICKS


def signal_group(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):  # already gone
        os.killpg(process.pid, signal.SIGKILL)


def kill(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL the child's whole process group and reap it: no orphans, ever."""
    signal_group(process)
    for stream in (process.stdin, process.stdout, process.stderr):
        try:
            if stream:
                stream.close()
        except OSError:
            pass
    try:
        process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
