"""Run untrusted JavaScript in a permissionless Deno process, in a fresh Worker (its own isolate) for every run.

The child gets no ``--allow-*`` flag, a minimal explicit environment, an empty working directory,
its own process group and closed file descriptors. After it reports ready, ``prlimit`` caps its
memory (RLIMIT_DATA), open files and core size, and before each run its CPU time (what it has used + the run's
budget); a wall-clock deadline kills the whole process group with SIGKILL. A process that answered a run cleanly
serves the next one (runner.js terminates each run's worker before it starts the next one's); a process whose run
did not answer (a timeout, a crash, a flood, a stop) is killed and replaced. One spare process is kept started and
waiting for code, so a call usually pays only write-code -> read-result (measured: ~8 ms of CPU a run, against
~40 ms when every run had a process of its own).

Usage::

    sandbox = JavaScriptSandbox()
    result = sandbox.run("10000 * Math.pow(1.05, 15)", timeout=5)
    result.payload          # {"result": 20789.281794113688, "output": ""}
"""

from __future__ import annotations

import atexit
import contextlib
import os
import resource
import secrets
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from chatloop.config import from_environment
from chatloop.jsontypes import JSONObject
from chatloop.tools.javascript import lifecycle
from chatloop.tools.javascript.frames import MAX_RESULT_CHARS as MAX_RESULT_CHARS  # where tests look for it
from chatloop.tools.javascript.frames import SandboxResult, checked_frame
from chatloop.tools.javascript.lifecycle import (
    close_all as close_all,  # the entry point's and snapstart's names
)
from chatloop.tools.javascript.lifecycle import close_all_on_signals as close_all_on_signals
from chatloop.tools.javascript.lifecycle import resume_all as resume_all
from chatloop.tools.javascript.lifecycle import suspend_all as suspend_all
from chatloop.tools.javascript.process import Read, cpu_ms, cpu_seconds, kill, read_until, signal_group

RUNNER = Path(__file__).with_name("runner.js")
READY_TIMEOUT = 10.0
MIN_RUN_SECONDS = 0.05
"""A run is not started with less time than this."""
MAX_STREAM_BYTES = 1024 * 1024
"""stdout + stderr a child may write before it is killed."""
HEAP_MB = 64
RUNS_PER_PROCESS = 100
"""A process is replaced after this many runs: each worker leaves a little behind in the process (measured: VmData
+33 MB over the first 100 runs, +8 MB a hundred after), which would reach RLIMIT_DATA after some thousands."""
UNWRITABLE_DENO_DIR = "/dev/null/deno"


def find_deno() -> str:
    """The Deno binary from the ``deno`` wheel (its own helper), or ``DENO_BIN``/PATH as a fallback."""
    explicit = from_environment("DENO_BIN")
    if explicit:
        return explicit
    try:
        import deno  # type: ignore[import-untyped]  # the PyPI wheel that ships the binary; it has no type hints

        return str(deno.find_deno_bin())
    except (ImportError, FileNotFoundError, RuntimeError):
        found = shutil.which("deno")
        if found:
            return found
        raise FileNotFoundError(
            "Deno binary not found: install the 'deno' package (pip install deno)"
        ) from None


@dataclass
class _Child:
    process: subprocess.Popen[bytes]
    started: float = field(default_factory=time.monotonic)
    ready: bool = False
    """It said "R" (its next worker is ready) and that was read already."""
    runs: int = 0
    cpu_ms: float | None = None
    """The CPU time its last run used (for the run's trace span); None when it could not be read."""


class JavaScriptSandbox:
    """A runner made of processes: at most ``max_concurrency`` Deno children at once, plus one spare."""

    def __init__(
        self,
        *,
        deno_path: str | None = None,
        memory_mb: int = 256,
        max_concurrency: int = 4,
        prespawn: bool = True,
    ):
        self.deno = deno_path or find_deno()
        self.memory_bytes = memory_mb * 1024 * 1024
        self.prespawn = prespawn
        self.runs_per_process = RUNS_PER_PROCESS
        self._slots = threading.BoundedSemaphore(max_concurrency)
        self._lock = threading.Lock()
        self._spare: _Child | None = None
        self._spare_starting = False
        self._refill: threading.Thread | None = None
        self._closed = False
        self.workdir = tempfile.mkdtemp(prefix="chatloop-js-")
        self._suspended = lifecycle.join(self)
        # No writable state: DENO_DIR is a path that cannot exist (a file's child), so Deno keeps its module, transpile
        # and code caches in memory and writes nothing, whatever the code imports (data:, blob:); no run can see
        # another's artefacts. Deno runs fine without it (measured: same startup time).
        self.env = {"DENO_DIR": UNWRITABLE_DENO_DIR, "NO_COLOR": "1", "DENO_NO_UPDATE_CHECK": "1"}
        self.command = [
            self.deno,
            "run",
            "--quiet",
            "--no-prompt",
            "--no-remote",
            "--no-npm",
            "--no-config",
            "--no-lock",
            "--cached-only",
            "--no-code-cache",
            f"--v8-flags=--jitless,--max-old-space-size={HEAP_MB},--max-semi-space-size=4",
            str(RUNNER),
        ]
        atexit.register(self.close)

    # --- spare process ---------------------------------------------------------------------
    def warm(self) -> None:
        """Start the spare now (in the background), e.g. at container init."""
        if self.prespawn:
            self._refill_spare_async()

    def _refill_spare_async(self) -> None:
        with self._lock:
            if self._spare is not None or self._spare_starting or self._closed or self._suspended:
                return
            self._spare_starting = True
            self._refill = threading.Thread(target=self._refill_spare, name="deno-spare", daemon=True)
            self._refill.start()

    def suspend(self) -> None:
        """No spare from now on, and none left: the spare is killed and a spare still starting is waited for (and
        killed). For a SnapStart snapshot, which must hold no child process. Runs still work (cold) meanwhile."""
        with self._lock:
            self._suspended = True
            refill, child, self._spare = self._refill, self._spare, None
        if refill is not None:
            refill.join(READY_TIMEOUT + 1)
        if child is not None:
            kill(child.process)

    def resume(self) -> None:
        """Undo ``suspend()`` and start the spare (after a SnapStart restore)."""
        with self._lock:
            self._suspended = False
        os.makedirs(self.workdir, exist_ok=True)  # a restored /tmp may not hold it
        self.warm()

    def _refill_spare(self) -> None:
        try:
            child = self._spawn()
        except Exception:
            child = None
        with self._lock:
            self._spare_starting = False
            if self._spare is None and child is not None and not self._closed and not self._suspended:
                self._spare, child = child, None
        if child is not None:
            kill(child.process)

    def _take_spare(self) -> _Child | None:
        with self._lock:
            starting = self._refill if self._spare is None and self._spare_starting else None
        if starting is not None:
            # A spare already starting (it starts once the turn's model call is in flight) is nearer ready than a
            # process started now, and two starting at once would share the CPU: wait for it.
            starting.join(READY_TIMEOUT)
        with self._lock:
            child, self._spare = self._spare, None
        if child is not None and child.process.poll() is not None:
            kill(child.process)  # it died while waiting: reap it and spawn cold
            return None
        return child

    def _spawn(self) -> _Child:
        process = subprocess.Popen(
            self.command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=self.env,
            cwd=self.workdir,
            start_new_session=True,
            close_fds=True,
        )
        child = _Child(process)
        try:
            ready = read_until(process, b"R\n", time.monotonic() + READY_TIMEOUT, limit=4096)
        except Exception:
            kill(process)
            raise
        if not ready.stdout.startswith(b"R\n"):
            kill(process)
            raise RuntimeError(
                f"the Deno runner did not start: {ready.stderr[-500:].decode(errors='replace')}"
            )
        limits = [
            (resource.RLIMIT_DATA, self.memory_bytes),
            (resource.RLIMIT_NOFILE, 64),
            (resource.RLIMIT_CORE, 0),
        ]
        try:
            for which, value in limits:
                resource.prlimit(process.pid, which, (value, value))
        except (ProcessLookupError, OSError):
            kill(process)
            raise RuntimeError("the Deno runner exited as it started") from None
        return child

    # --- running code ----------------------------------------------------------------------
    def run(
        self,
        code: str,
        timeout: float = 5.0,
        *,
        not_after: float | None = None,
        stop: threading.Event | None = None,
    ) -> SandboxResult:
        """Run ``code`` (blocking) and return its JSON-safe result. Never raises for what the code does.

        ``not_after`` (a ``time.monotonic()`` instant, the request's deadline) bounds the wait for a free slot too:
        a run that cannot start in time is a ``SandboxBusyError``, never an overrun. Setting ``stop`` (the client
        went away) kills the run at once."""
        start = time.monotonic()
        wait = timeout if not_after is None else not_after - start - MIN_RUN_SECONDS
        if wait <= 0 or not self._slots.acquire(timeout=wait):
            return SandboxResult(
                {
                    "error": "SandboxBusyError: every sandbox slot stayed busy until the deadline",
                    "output": "",
                },
                _ms(start),
            )
        try:
            if not_after is not None:
                timeout = min(timeout, not_after - time.monotonic())
            return self._run_in_slot(code, timeout, start, stop)
        finally:
            self._slots.release()

    def _run_in_slot(
        self, code: str, timeout: float, start: float, stop: threading.Event | None
    ) -> SandboxResult:
        child = self._take_spare() if self.prespawn else None
        prespawned = child is not None
        try:
            if child is None:
                child = self._spawn()
        except Exception as exc:
            error = f"SandboxError: could not start the sandbox ({type(exc).__name__})"
            return SandboxResult({"error": error, "output": ""}, _ms(start))
        answered = False
        try:
            payload, answered = self._execute(child, code, timeout, stop)
        finally:
            if not (answered and self._keep(child)):
                # SIGKILL now, so nothing of the run goes on; reaping it and starting the next spare happen in the
                # background, after the result is in hand, instead of competing with this run for the CPU.
                signal_group(child.process)
                threading.Thread(
                    target=self._after_run, args=(child.process,), name="deno-reap", daemon=True
                ).start()
        return SandboxResult(payload, _ms(start), prespawned, child.cpu_ms)

    def _keep(self, child: _Child) -> bool:
        """Make a process that answered cleanly the spare once its next worker is ready (runner.js says "R" again),
        unless there is a spare or one starting (or no spare is wanted)."""
        with self._lock:
            if not self.prespawn or self._closed or self._suspended or self._spare is not None:
                return False
            if self._spare_starting or child.runs >= self.runs_per_process:
                return False
            self._spare_starting = True
            self._refill = threading.Thread(target=self._reuse, args=(child,), name="deno-reuse", daemon=True)
            self._refill.start()
            return True

    def _reuse(self, child: _Child) -> None:
        if not child.ready:
            got = read_until(child.process, b"R\n", time.monotonic() + READY_TIMEOUT, limit=4096)
            child.ready = got.stdout.startswith(b"R\n")
        with self._lock:
            self._spare_starting = False
            keep = child.ready and self._spare is None and not self._closed and not self._suspended
            if keep:
                self._spare, child.ready = child, False
        if not keep:
            kill(child.process)
            self.warm()

    def _after_run(self, process: subprocess.Popen[bytes]) -> None:
        kill(process)
        if self.prespawn:
            self._refill_spare_async()

    def _execute(
        self, child: _Child, code: str, timeout: float, stop: threading.Event | None = None
    ) -> tuple[JSONObject, bool]:
        """The run's payload, and whether the process answered cleanly (and may serve another run)."""
        process = child.process
        child.runs += 1
        cpu = max(1, int(timeout) + 1)
        try:
            # The soft limit only (SIGXCPU ends the process): the hard one is left as it is, so the next run can
            # raise the soft one again without privileges.
            _, hard = resource.prlimit(process.pid, resource.RLIMIT_CPU)
            soft = cpu_seconds(process.pid) + cpu
            resource.prlimit(process.pid, resource.RLIMIT_CPU, (soft if hard < 0 else min(soft, hard), hard))
        except (ProcessLookupError, OSError):
            error: JSONObject = {
                "error": "SandboxError: the sandbox process exited before running the code",
                "output": "",
            }
            return error, False
        token = secrets.token_hex(16).encode()
        encoded = code.encode("utf-8", "surrogatepass")
        deadline = time.monotonic() + timeout
        with contextlib.suppress(BrokenPipeError, OSError):  # a dead process is reported by the read below
            if process.stdin is not None:  # always a pipe: Popen(stdin=PIPE)
                process.stdin.write(token + b" %d\n" % len(encoded) + encoded)
                process.stdin.flush()
        before = cpu_ms(process.pid)
        got = read_until(process, token, deadline, limit=MAX_STREAM_BYTES, line_after=True, stop=stop)
        after = cpu_ms(process.pid)
        child.cpu_ms = None if before is None or after is None else max(0.0, after - before)
        if got.stopped:
            return {"error": "CancelledError: the run was stopped (the request ended)", "output": ""}, False
        if got.line is not None:
            child.ready = got.rest.startswith(b"R\n")  # its next worker was ready before this read ended
            return checked_frame(got.line), True
        return self._failure(process, got, timeout, deadline, cpu), False

    def _failure(
        self, process: subprocess.Popen[bytes], got: Read, timeout: float, deadline: float, cpu: int
    ) -> JSONObject:
        """Why a run ended without a result frame."""
        if got.overflow:
            return {
                "error": f"OutputLimitError: output exceeded {MAX_STREAM_BYTES // 1024} KiB",
                "output": "",
            }
        if got.timed_out:
            return {"error": f"TimeoutError: execution exceeded {timeout:g} s and was stopped", "output": ""}
        try:  # both pipes closed: the process may still be running (user code can close its stdout)
            returncode = process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            return {"error": f"TimeoutError: execution exceeded {timeout:g} s and was stopped", "output": ""}
        stderr = got.stderr.decode("utf-8", "replace")
        if (
            "out of memory" in stderr.lower()
            or "allocation failed" in stderr.lower()
            or returncode in (-5, -6, -11)
        ):
            return {
                "error": f"MemoryError: the code ran out of memory (limit {self.memory_bytes >> 20} MiB)",
                "output": "",
            }
        if "never resolved" in stderr:
            return {"error": "PromiseError: the code awaited a promise that can never resolve", "output": ""}
        if returncode in (-signal.SIGKILL, -signal.SIGXCPU):
            return {"error": f"CPULimitError: the code used more than {cpu} s of CPU time", "output": ""}
        return {
            "error": f"SandboxError: the code ended the sandbox without a result (exit code {returncode})",
            "output": "",
        }

    def close(self) -> None:
        """Kill the spare and remove the work directory; no new spare is started after this (a run finishing in the
        background included)."""
        with self._lock:
            self._closed = True
            child, self._spare = self._spare, None
        if child is not None:
            kill(child.process)
        shutil.rmtree(self.workdir, ignore_errors=True)
        lifecycle.leave(self)


def _ms(start: float) -> float:
    return (time.monotonic() - start) * 1000
