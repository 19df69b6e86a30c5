"""A cgroup sized like a Lambda function: CPU in proportion to MemorySize (one vCPU at 1,769 MB, linearly less
below) and memory capped at MemorySize. The bench creates it, puts the processes it measures in it, and removes it.

cgroup v2 (``cpu.max`` + ``memory.max`` in the unified hierarchy) where the unified hierarchy has the ``cpu`` and
``memory`` controllers; cgroup v1 (``cpu.cfs_quota_us`` + ``memory.limit_in_bytes``) where they are bound to v1
hierarchies instead (a hybrid host, as this one: ``/sys/fs/cgroup/unified`` has only ``hugetlb``). Both give the
same CFS bandwidth limit: ``quota`` µs of CPU per ``period`` µs, spread over any number of cores.

Usage::

    why = unavailable()                       # None, or why not (not root, no controllers)
    with LambdaCgroup("bench-512", 512) as group:
        subprocess.run(cmd, preexec_fn=group.enter)   # the child and all it starts run inside
        group.rss_bytes()                     # anonymous memory of every process in it (no page cache)
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from types import TracebackType

FULL_CORE_MB = 1769
"""Lambda gives one vCPU at 1,769 MB of MemorySize (AWS: "Memory and computing power")."""
PERIOD_US = 100_000
ROOT = Path("/sys/fs/cgroup")


def _v2_root() -> Path | None:
    """The unified hierarchy's mount point, if its root offers both the cpu and the memory controller."""
    try:
        mounts = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return None
    for line in mounts:
        fields = line.split()
        if len(fields) > 2 and fields[2] == "cgroup2":
            root = Path(fields[1])
            try:
                controllers = (root / "cgroup.controllers").read_text().split()
            except OSError:
                continue
            if {"cpu", "memory"} <= set(controllers):
                return root
    return None


def version() -> str | None:
    """``"v2"`` or ``"v1"``: which kind of cgroup this host can give CPU and memory limits with; None if neither."""
    if _v2_root() is not None:
        return "v2"
    if (ROOT / "cpu" / "cpu.cfs_quota_us").exists() and (ROOT / "memory" / "memory.limit_in_bytes").exists():
        return "v1"
    return None


def unavailable() -> str | None:
    """None when Lambda-sized cgroups can be made here, else why not."""
    if not Path("/proc/self/mounts").exists():
        return "not Linux"
    if os.geteuid() != 0:
        return "not root (cgroups cannot be created)"
    if version() is None:
        return "no cgroup with the cpu and memory controllers (neither v2's unified hierarchy nor v1's)"
    return None


def cpu_share(memory_mb: int) -> float:
    """The vCPU Lambda gives ``memory_mb``: 0.29 at 512, 0.58 at 1,024, 1.0 at 1,769."""
    return memory_mb / FULL_CORE_MB


class LambdaCgroup:
    """One cgroup (v2) or a cpu + a memory cgroup (v1) named ``name``, limited like ``memory_mb``."""

    def __init__(self, name: str, memory_mb: int):
        self.name, self.memory_mb = name, memory_mb
        self.kind = version()
        self.dirs: list[Path] = []

    def __enter__(self) -> LambdaCgroup:
        quota = int(PERIOD_US * cpu_share(self.memory_mb))
        limit = str(self.memory_mb * 1024 * 1024)
        if self.kind == "v2":
            root = _v2_root()
            assert root is not None
            control = root / "cgroup.subtree_control"
            if not {"cpu", "memory"} <= set(control.read_text().split()):
                control.write_text("+cpu +memory")  # children of the root may then be limited
            group = root / self.name
            group.mkdir()
            self.dirs = [group]
            (group / "cpu.max").write_text(f"{quota} {PERIOD_US}")
            (group / "memory.max").write_text(limit)
        else:
            cpu, memory = ROOT / "cpu" / self.name, ROOT / "memory" / self.name
            cpu.mkdir()
            self.dirs = [cpu]
            memory.mkdir()
            self.dirs.append(memory)
            (cpu / "cpu.cfs_period_us").write_text(str(PERIOD_US))
            (cpu / "cpu.cfs_quota_us").write_text(str(quota))
            (memory / "memory.limit_in_bytes").write_text(limit)
        return self

    def enter(self) -> None:
        """Move the calling process into the cgroup (a ``preexec_fn``: the child, before it execs)."""
        for group in self.dirs:
            (group / "cgroup.procs").write_text(str(os.getpid()))

    def rss_bytes(self) -> int:
        """Anonymous memory of every process in the cgroup (the handler and its Deno children; no page cache)."""
        stat = self.dirs[-1] / "memory.stat"
        key = "anon" if self.kind == "v2" else "total_rss"
        for line in stat.read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return int(value)
        return 0

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        for group in reversed(self.dirs):
            for _ in range(100):  # its last processes (Deno children being reaped) may take a moment to go
                try:
                    group.rmdir()
                    break
                except OSError:
                    time.sleep(0.1)
