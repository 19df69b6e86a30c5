"""A server stopped by a signal leaves nothing behind: no sandbox work directory in TMPDIR, no Deno process.

SIGTERM is how a platform stops a server (Lambda's runtime at shutdown, a container runtime), SIGINT how a terminal
does. Each test starts its own server process and signals only that process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import httpx
import pytest

from tests.support.adapter import ROOT, adapter_headers, run_sh
from tests.support.fake_llm import FakeLLM
from tests.support.processes import children_of
from tests.support.wire_models import realistic

pytestmark = pytest.mark.slow  # each test starts a server process


def workdirs(tmpdir) -> list[str]:
    return sorted(p.name for p in tmpdir.iterdir() if p.name.startswith("chatloop-js-"))


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT])
def test_the_stream_server_removes_its_sandbox_workdir_when_signalled(tmp_path, stop):
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    with FakeLLM() as llm:
        llm.default = realistic
        with run_sh(llm, tmp_path, TMPDIR=str(tmpdir)) as served:
            body = {"messages": [{"role": "user", "content": "what is 5!"}], "stream": False}
            answer = httpx.post(f"{served.url}/chat", json=body, headers=adapter_headers(60), timeout=30)
            assert answer.status_code == 200 and "120" in answer.text
            assert workdirs(tmpdir)  # the sandbox ran: its work directory exists
            sandboxes = children_of(served.process.pid)
            served.process.send_signal(stop)
            served.process.wait(timeout=20)
            assert workdirs(tmpdir) == [], served.log.read_text()[-2000:]
            for pid in sandboxes:  # the spare Deno process went with it
                with pytest.raises(ProcessLookupError):
                    os.kill(pid, 0)


BUFFERED = textwrap.dedent(
    """
    import sys, time
    sys.path[:0] = [sys.argv[1] + "/src"]
    import app
    box = app.app.state.runtime.tools.registry().get("execute_javascript").sandbox
    assert box.run("1 + 1").payload["result"] == 2
    print("ready", flush=True)
    time.sleep(60)
    """
)


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT])
def test_the_lambda_handlers_process_removes_its_sandbox_workdir_when_signalled(tmp_path, stop):
    """Buffered mode: no server handles the signal, so ``import app`` did (and then the process dies of it)."""
    env = {
        "PATH": "/usr/bin:/bin",
        "TMPDIR": str(tmp_path),
        "POWERTOOLS_SERVICE_NAME": "chatloop-test",
        "POWERTOOLS_LOG_LEVEL": "ERROR",
    }
    process = subprocess.Popen(
        [sys.executable, "-c", BUFFERED, str(ROOT)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None and process.stdout.readline().strip() == "ready"
        assert workdirs(tmp_path)
        process.send_signal(stop)
        process.wait(timeout=20)
    finally:
        process.kill()
        process.wait()
    assert workdirs(tmp_path) == []
    if stop == signal.SIGTERM:
        assert process.returncode == -signal.SIGTERM  # still stopped by the signal, as before
