"""The process bench/lambda_size.py measures: run by the Lambda runtime's bare interpreter inside the cgroup, with
``python3.12 -I -B bench/lambda_child.py MODE TURNS PATH...`` (the PATHs, the unpacked function and layer, go first on
``sys.path``; ``-I`` keeps this file's folder off it). It reports one JSON line, prefixed ``BENCH ``, on stdout.

- ``cold``: ``import app``, a first turn (the monotonic clock when it was answered, the CPU used until then), then
  ``TURNS`` warm turns;
- ``check``: the same, recording (with an audit hook: untimed) every module the import system compiled from source,
  how many texts each module compiled as it ran (``generated``; ``chatloop.codecache``'s table, when the tree has
  one, serves dataclasses', typing's and re's: its hits and misses), and every file of the artefacts opened more
  than once;
- ``count``: ``import app`` and a first turn, then out at once (``os._exit``): what callgrind counts is the
  instructions to the first answer;
- ``profile``: ``import app`` and a first turn under pyinstrument (wall clock, 1 ms samples): the text profile;
- ``primed``: ``import app`` and the before-snapshot hooks, then, for each ``restore`` line read on stdin, a fork (a
  copy of the snapshot) that runs the after-restore hooks and a first turn, and reports.
"""

import importlib
import json
import os
import resource
import sys
import time
from types import ModuleType
from typing import Any

PREFIX = "BENCH "
QUESTION = "What do $10,000 at 5% compounded annually for 15 years grow to?"
ANSWER = "20789.28"
EVENT: dict[str, Any] = {  # a REST API (v1) proxy event for POST /chat, as API Gateway sends it
    "resource": "/{proxy+}",
    "path": "/chat",
    "httpMethod": "POST",
    "body": json.dumps({"messages": [{"role": "user", "content": QUESTION}], "stream": False}),
    "isBase64Encoded": False,
    "headers": {"content-type": "application/json", "host": "bench.execute-api.us-east-1.amazonaws.com"},
    "multiValueHeaders": {"content-type": ["application/json"]},
    "queryStringParameters": None,
    "multiValueQueryStringParameters": None,
    "pathParameters": {"proxy": "chat"},
    "stageVariables": None,
    "requestContext": {
        "requestId": "bench",
        "stage": "prod",
        "resourcePath": "/{proxy+}",
        "httpMethod": "POST",
        "path": "/prod/chat",
        "identity": {"sourceIp": "127.0.0.1", "apiKeyId": "bench"},
        "requestTimeEpoch": 0,
    },
}


class Context:
    function_name = "chatloop-bench"
    function_version = "1"
    memory_limit_in_mb = int(os.environ.get("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "512"))
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:chatloop-bench"
    aws_request_id = "bench"
    log_group_name = log_stream_name = "bench"

    def get_remaining_time_in_millis(self) -> int:
        # under callgrind (``count``), ~50 times slower: time enough for the turn it counts
        return 28000 * (60 if sys.argv[1] == "count" else 1)


def cpu_ms() -> float:
    """This process's CPU (every thread's) since it started; in a forked copy, since the fork."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return (usage.ru_utime + usage.ru_stime) * 1000


def report(out: dict[str, Any]) -> None:
    os.write(1, (PREFIX + json.dumps(out) + "\n").encode())  # unbuffered: a forked copy reports, then _exits


class Turns:
    def __init__(self, app: ModuleType, warm: int):
        self.app, self.warm = app, warm

    def one(self) -> float:
        start = time.perf_counter()
        response = self.app.handler(dict(EVENT), Context())
        elapsed = (time.perf_counter() - start) * 1000
        assert response["statusCode"] == 200 and ANSWER in response["body"], response
        return elapsed

    def warm_turns(self) -> dict[str, list[float]]:
        """``warm`` more turns: wall ms each, and the CPU ms each used."""
        wall, cpu = [], []
        for _ in range(self.warm):
            time.sleep(0.1)  # between requests: the spare is refilled, as it is between real turns
            before = cpu_ms()
            wall.append(self.one())
            cpu.append(cpu_ms() - before)
        return {"warm_ms": wall, "warm_cpu_ms": cpu}


def main() -> None:
    mode, warm = sys.argv[1], int(sys.argv[2])
    sys.path[:0] = sys.argv[3:]
    compiled: list[str] = []
    generated: dict[str, int] = {}
    opened: dict[str, int] = {}
    if mode == "check":
        roots = tuple(sys.argv[3:])

        def audit(event: str, args: tuple[Any, ...]) -> None:
            # a module compiled from source by the import system (not a library's own parse of some text)
            if event == "compile" and sys._getframe(2).f_code.co_name == "source_to_code":
                compiled.append(args[1])
            # code compiled from text as modules run (dataclasses' methods, typing's forward references, ...)
            elif event == "compile":
                caller = sys._getframe(1).f_globals.get("__name__", "?")  # what called compile/exec/eval
                generated[caller] = generated.get(caller, 0) + 1
            # a file of the artefacts opened (the import system reads each .pyc once through open_code)
            elif event == "open" and isinstance(args[0], str) and args[0].startswith(roots):
                opened[args[0]] = opened.get(args[0], 0) + 1

        sys.addaudithook(audit)
    profiler = None
    if (
        mode == "profile"
    ):  # the profiler comes from the bench's own environment, after the artefacts on the path
        sys.path.append(os.environ["BENCH_SITE_PACKAGES"])
        from pyinstrument import Profiler

        profiler = Profiler(interval=0.001)
        profiler.start()
    start = time.perf_counter()
    app = importlib.import_module("app")
    import_ms = (time.perf_counter() - start) * 1000
    turns = Turns(app, warm)
    if profiler is not None:
        turns.one()
        profiler.stop()
        report({"profile": profiler.output_text(unicode=False, color=False, show_all=False)})
        return
    if mode == "count":  # under callgrind: up to the first answer, nothing after (no warm turn, no shutdown)
        turns.one()
        importlib.import_module("chatloop.tools.javascript.sandbox").close_all()
        report({"answered": True})
        os._exit(0)
    if mode in ("cold", "check"):
        first = turns.one()
        answered, cpu = time.monotonic(), cpu_ms()
        out = {"answered": answered, "cpu_ms": cpu, "import_ms": import_ms, "first_turn_ms": first}
        twice = sorted(path for path, count in opened.items() if count > 1)
        codecache = sys.modules.get("chatloop.codecache")
        cache = (
            codecache.installed() if codecache is not None else None
        )  # this tree's table (absent in older ones)
        report(
            {
                **out,
                **turns.warm_turns(),
                "compiled": compiled,
                "generated": generated,
                "codecache": None if cache is None else {"hits": cache.hits, "misses": cache.misses},
                "opened": len(opened),
                "read_twice": twice,
            }
        )
        return
    snapstart = importlib.import_module("chatloop.snapstart")
    runtime = app.app.state.runtime
    snapstart.before_snapshot(runtime)
    report({"primed": True})
    for line in sys.stdin:
        if line.strip() != "restore":
            break
        pid = os.fork()
        if pid == 0:  # one restored copy of the snapshot
            start = time.monotonic()
            snapstart.after_restore(runtime)
            hooks_ms = (time.monotonic() - start) * 1000
            turns.one()
            restored_ms, cpu = (time.monotonic() - start) * 1000, cpu_ms()
            report({"restored_ms": restored_ms, "cpu_ms": cpu, "hooks_ms": hooks_ms, **turns.warm_turns()})
            importlib.import_module("chatloop.tools.javascript.sandbox").close_all()
            os._exit(0)
        os.waitpid(pid, 0)


if __name__ == "__main__":
    main()
