"""Lambda-sized first turns: the built artefacts under a cgroup sized like a MemorySize, this tree against the
previous main, measured in one run.

Both trees are built as ``scripts/package.py`` builds them (``build/layer.zip`` + ``build/function.zip``; the layer
cached by ``bench/artefacts.py``), unpacked read-only (as ``/opt`` and ``/var/task``), and run by ``python3.12 -I -B``
(``bench/lambda_child.py``) with only those two on ``sys.path``, as an unprivileged user where the interpreter allows
it (Lambda's own user cannot write there either: a missing ``.pyc`` is compiled on every start, which ``-B``
reproduces for root), in a cgroup whose CPU is MemorySize / 1,769 of a core and whose memory is MemorySize
(``bench/cgroups.py``). The handler gets REST API events for a compound-interest turn (two model calls: a tool call,
then the answer; one sandbox run) from a loopback model (the groq SDK over HTTP) that takes ``MODEL_SECONDS`` a call.
Per size and tree:

- ``cold_ms``: process start (before ``exec``) -> first turn answered, less the model's time;
- ``restored_ms``: the after-restore hooks -> first turn answered, less the model's time, in a process forked from
  one that ran ``import app`` and the before-snapshot hooks (a snapshot): each sample is a new copy of one snapshot,
  as SnapStart restores one. A fork copies memory on write as a restore faults pages in, not as expensively;
- ``cold_cpu_ms`` / ``restored_cpu_ms``: the CPU the handler's process used until that first answer (all its
  threads; the Deno processes not included), a figure other load on the machine moves less: divided by the size's
  CPU share, it is what that CPU costs in wall time, were none of it hidden behind the model's time;
- ``warm_overhead_ms``: a later turn less the model's time (``warm_cpu_ms``: the handler's CPU in it);
  ``import_ms``; ``peak_rss_mb`` (cold runs, the cgroup's anonymous memory: the handler and every Deno process);
- ``instructions_m``: the millions of instructions from the handler's start to its first answer (callgrind; not in
  the smoke run): what no other load on the machine changes;
- ``compiled`` / ``read_twice``: the ``.py`` files a cold start compiled and the files of the artefacts it opened more
  than once (an audit hook, in a separate, untimed run): none, when the artefacts ship bytecode for every module they
  import and nothing is read again; ``generated``: the texts compiled as modules ran, by the module that compiled
  them, and ``codecache``: the hits and misses of the shipped table (``chatloop.codecache``) that serves dataclasses',
  typing's and re's.

The two trees alternate, sample by sample, with which goes first alternating too: whatever else the machine is doing
(this is a shared 2-core machine) falls on both alike. Medians are reported, with this tree / main.

A third run alternates with them (not in the smoke run: ``measure(..., bedrock=False)``): this tree's artefacts with
a Bedrock-only chain (issue #43: ``MODEL_CHAIN=bedrock:amazon.nova-lite-v1:0``), the same turn from a fake Bedrock
Runtime on loopback (``tests/support/fake_bedrock.py``: ConverseStream's event stream, through botocore's real client,
``AWS_ENDPOINT_URL_BEDROCK_RUNTIME`` and fake credentials). Its figures (``bedrock`` beside ``here`` in each size's
row) are compared with this tree's Groq chain: the previous main has no ``bedrock:`` provider to compare with.

Usage::

    .venv/bin/python -m bench.lambda_size --runs 5            # prints JSON; make bench reports it (section 13)
    .venv/bin/python -m bench.lambda_size --write bench/RESULTS.md   # this section alone (make bench SECTION=lambda_size)
    .venv/bin/python -m bench.lambda_size --profile 512       # a cold start's pyinstrument profile at 512 MB
    .venv/bin/python -m bench.lambda_size --profile 512 --chain bedrock   # ... with the Bedrock-only chain
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from bench import ROOT, artefacts
from bench.cgroups import LambdaCgroup, cpu_share, unavailable, version
from bench.common import median, tree_at

if TYPE_CHECKING:
    from tests.support.fake_bedrock import FakeBedrock

SIZES = (512, 1024, 1769)
MODEL_SECONDS = 0.3
MODEL_CALLS_PER_TURN = 2  # the compound-interest turn: a tool call, then the answer
TARGETS_AT_512 = {"cold_ms": 1200.0, "restored_ms": 400.0, "warm_overhead_ms": 20.0}
"""Issue #34: at 512 MB, a cold start of at most 1.2 s, a first turn after a restore of at most 0.4 s, a warm turn's
own cost of at most 20 ms."""
UNPRIVILEGED = 65534
"""``nobody``: Lambda runs the function as a user that cannot write to /var/task or /opt."""
PREFIX = "BENCH "
BEDROCK_MODEL = "amazon.nova-lite-v1:0"
"""The Bedrock-only chain's model (``bedrock:`` + this catalog id): the same first turn, on Converse's wire."""

CHILD = Path(__file__).with_name("lambda_child.py")
"""The measured process (``bench/lambda_child.py``): ``cold``, ``check`` or ``primed`` mode."""


def available() -> str | None:
    """None when Lambda-sized runs can happen here, else why not."""
    why = unavailable()
    if why:
        return why
    if not _lambda_python():
        return "no python3.12 (the Lambda runtime's version) to run the artefacts with"
    return None


def _lambda_python() -> str | None:
    base = Path(sys.base_prefix) / "bin" / "python3.12"
    if sys.version_info[:2] == (3, 12) and base.exists():
        return str(base)
    return shutil.which("python3.12")


def previous_main() -> str:
    """The main this tree lands on: where it left main (the merge-base), or on main itself, the commit before the
    last one (its first parent: main before the last merge)."""
    git = shutil.which("git") or "/usr/bin/git"

    def rev(*args: str) -> str:
        return subprocess.run(
            [git, *args], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()

    head = rev("rev-parse", "HEAD")
    try:
        main = rev("rev-parse", "main")
    except subprocess.CalledProcessError:
        return rev("rev-parse", "HEAD^")
    base = rev("merge-base", "HEAD", main)
    return rev("rev-parse", "HEAD^") if base == head else base


def _environment(memory_mb: int, model_url: str, home: str) -> dict[str, str]:
    """The function's environment at ``memory_mb``, its chain the groq SDK's model at ``model_url``."""
    return {
        "PATH": "/usr/bin:/bin",
        "HOME": home,
        "TMPDIR": home,
        "LANG": "C.UTF-8",
        "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(memory_mb),
        "AWS_LAMBDA_FUNCTION_NAME": "chatloop-bench",
        "AWS_REGION": "us-east-1",
        "GROQ_API_KEY": "gsk_bench_key_0000000000",
        "GROQ_BASE_URL": model_url,
        "MODEL_CHAIN": "groq:llama-3.3-70b-versatile",
        "POWERTOOLS_SERVICE_NAME": "chatloop-bench",
        "POWERTOOLS_LOG_LEVEL": "WARNING",
        "POWERTOOLS_METRICS_DISABLED": "true",
        "POWERTOOLS_METRICS_NAMESPACE": "ChatLoopBench",
    }


def _bedrock_environment(memory_mb: int, aws: FakeBedrock, home: str) -> dict[str, str]:
    """``_environment`` with a Bedrock-only chain instead (issue #43): ``bedrock:`` + a catalog model, boto3 pointed at
    the fake Bedrock Runtime on loopback (``AWS_ENDPOINT_URL_BEDROCK_RUNTIME``) and signing with its fake
    credentials, as the function's role's would be read from the environment; no Groq key."""
    env = _environment(memory_mb, "", home)
    for name in ("GROQ_API_KEY", "GROQ_BASE_URL"):
        del env[name]
    return {**env, **aws.environment(), "MODEL_CHAIN": f"bedrock:{BEDROCK_MODEL}"}


class Tree:
    """One code base's unpacked artefacts and how to start them inside a cgroup."""

    def __init__(self, label: str, paths: list[str], python: str, home: Path):
        self.label, self.paths, self.python, self.home = label, paths, python, home

    def command(self, mode: str, turns: int) -> list[str]:
        return [self.python, "-I", "-B", str(CHILD), mode, str(turns), *self.paths]

    def preexec(self, group: LambdaCgroup) -> Any:
        unprivileged = os.geteuid() == 0 and _others_may_run(self.python)

        def enter() -> (
            None
        ):  # in the child, before exec: it and all it starts run in the cgroup, unprivileged
            group.enter()
            if unprivileged:
                os.setgid(UNPRIVILEGED)
                os.setuid(UNPRIVILEGED)

        return enter


def _others_may_run(python: str) -> bool:
    """Whether a user other than its owner can run ``python`` (a pyenv build under /root cannot be: then the runs
    stay root, which read-only modes do not stop, and ``-B`` alone keeps bytecode from being written)."""
    path = Path(python).resolve()
    return all(p.stat().st_mode & 0o001 for p in [path, *path.parents])


def _read_report(stream: IO[str], process: subprocess.Popen[str], errors: Path) -> dict[str, Any]:
    for line in stream:
        if line.startswith(PREFIX):
            report: dict[str, Any] = json.loads(line[len(PREFIX) :])
            return report
    process.wait(30)
    raise RuntimeError(f"the Lambda-sized run failed: {errors.read_text()[-3000:]}")


def run_cold(
    tree: Tree, group: LambdaCgroup, env: dict[str, str], mode: str = "cold", turns: int = 2
) -> dict[str, Any]:
    """One cold start: process start -> first turn answered (model time included; the caller subtracts it)."""
    errors = tree.home / f"{tree.label}-{mode}.err"
    peak = [0]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            with contextlib.suppress(OSError, ValueError):
                peak[0] = max(peak[0], group.rss_bytes())
            time.sleep(0.01)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    with errors.open("w") as err:
        started = time.monotonic()
        process = subprocess.Popen(
            tree.command(mode, turns),
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            preexec_fn=tree.preexec(group),
            cwd=tree.home,
        )
        try:
            assert process.stdout is not None
            out = _read_report(process.stdout, process, errors)
            process.wait(60)
        finally:
            done.set()
            sampler.join()
            if process.poll() is None:
                process.kill()
                process.wait()
    if "answered" in out:
        out["process_ms"] = (out.pop("answered") - started) * 1000
    out["peak_rss_mb"] = peak[0] / 1024 / 1024
    return out


@contextlib.contextmanager
def primed(tree: Tree, group: LambdaCgroup, env: dict[str, str]) -> Iterator[Any]:
    """A process that ran ``import app`` and the before-snapshot hooks (a snapshot); ``restore()`` forks a copy of
    it, which runs the after-restore hooks and a first turn."""
    errors = tree.home / f"{tree.label}-primed.err"
    with errors.open("w") as err:
        process = subprocess.Popen(
            tree.command("primed", 1),
            env={**env, "AWS_LAMBDA_INITIALIZATION_TYPE": "snap-start"},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            preexec_fn=tree.preexec(group),
            cwd=tree.home,
        )
        assert process.stdin is not None and process.stdout is not None
        stdin, stdout = process.stdin, process.stdout
        try:
            _read_report(stdout, process, errors)

            def restore() -> dict[str, Any]:
                stdin.write("restore\n")
                stdin.flush()
                return _read_report(stdout, process, errors)

            yield restore
        finally:
            with contextlib.suppress(OSError):
                stdin.write("quit\n")
                stdin.close()
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def instructions(tree: Tree, env: dict[str, str]) -> float | None:
    """Millions of instructions the handler's process runs from its start to the first turn's answer (all its
    threads), counted by callgrind: the same on a busy machine as on an idle one, at any CPU share. None without
    valgrind."""
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        return None
    counted = tree.home / f"{tree.label}.callgrind"
    slow = {
        "MODEL_FIRST_CHUNK_TIMEOUT_SECONDS": "600"
    }  # valgrind runs it ~50 times slower: no model is "silent"
    done = subprocess.run(
        [valgrind, "--tool=callgrind", f"--callgrind-out-file={counted}", *tree.command("count", 0)],
        env={**env, **slow},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        cwd=tree.home,
        timeout=900,
        check=False,
    )
    counted.unlink(missing_ok=True)
    found = re.search(r"Collected : (\d+)", done.stderr)
    if done.returncode != 0 or found is None or PREFIX not in done.stdout:
        raise RuntimeError(f"the counted run failed: {done.stderr[-3000:]}")
    return int(found.group(1)) / 1e6


def _model_ms() -> float:
    return MODEL_CALLS_PER_TURN * MODEL_SECONDS * 1000


def measure(
    runs: int, turns: int, sizes: tuple[int, ...] = SIZES, base: str | None = None, bedrock: bool = True
) -> dict[str, Any]:
    """``runs`` cold starts and ``runs`` restores per size and tree, the trees alternating sample by sample. With
    ``bedrock``, a third run alternates with them: this tree with a Bedrock-only chain (``bedrock`` in each size's
    row, compared with this tree's Groq chain: ``here``)."""
    why = available()
    if why:
        return {"skipped": why}
    from tests.support.fake_bedrock import FakeBedrock
    from tests.support.fake_llm import FakeLLM
    from tests.support.wire_models import realistic, realistic_bedrock

    python = _lambda_python()
    assert python is not None
    base = base or previous_main()
    out: dict[str, Any] = {
        "model_seconds": MODEL_SECONDS,
        "base_commit": base[:7],
        "runs": runs,
        "cgroup": version(),
        "targets_at_512": TARGETS_AT_512,
        "sizes": {},
    }
    if bedrock:
        out["bedrock_model"] = BEDROCK_MODEL
    with (
        tempfile.TemporaryDirectory(prefix="chatloop-lambda-bench-") as tmp,
        FakeLLM() as llm,
        FakeBedrock(verify=False) as aws,  # its own work unchecked: the Groq fake checks no key either
    ):
        llm.default = lambda body: replace(realistic(body), delay=MODEL_SECONDS)
        aws.default = lambda body: replace(realistic_bedrock(body), delay=MODEL_SECONDS)
        work = Path(tmp)
        home = work / "home"
        home.mkdir()
        work.chmod(0o755)
        home.chmod(0o1777)
        trees = {}
        for label, root in (("here", ROOT), ("base", tree_at(base, work / "base-src"))):
            paths = [
                str(artefacts.function(root / "src", work / label / "task")),
                str(artefacts.layer(root / "requirements.txt") / "python"),
            ]
            trees[label] = Tree(label, paths, python, home)
        if bedrock:  # this tree's artefacts again, another chain
            trees["bedrock"] = Tree("bedrock", trees["here"].paths, python, home)
        for size in sizes:
            envs = {label: _environment(size, llm.groq_base_url, str(home)) for label in trees}
            if bedrock:
                envs["bedrock"] = _bedrock_environment(size, aws, str(home))
            out["sizes"][str(size)] = _measure_size(
                out, trees, envs, size, runs, turns, first=size == sizes[0]
            )
    return out


def _measure_size(
    out: dict[str, Any],
    trees: dict[str, Tree],
    envs: dict[str, dict[str, str]],
    size: int,
    runs: int,
    turns: int,
    first: bool,
) -> dict[str, Any]:
    """One size's row: each tree's samples, alternating (and, at the first size, the untimed checks into ``out``)."""
    model_ms = _model_ms()
    samples: dict[str, dict[str, list[float]]] = {label: {} for label in trees}
    name = f"chatloop-bench-{os.getpid()}-{size}"
    with contextlib.ExitStack() as stack:
        groups = {
            (label, mode): stack.enter_context(LambdaCgroup(f"{name}-{label}-{mode}", size))
            for label in trees
            for mode in ("cold", "primed")
        }
        restorers = {
            label: stack.enter_context(primed(tree, groups[label, "primed"], envs[label]))
            for label, tree in trees.items()
        }
        for round_ in range(runs):
            order = list(trees) if round_ % 2 == 0 else list(trees)[::-1]
            for label in order:
                cold = run_cold(trees[label], groups[label, "cold"], envs[label], turns=turns)
                row = samples[label]
                row.setdefault("cold_ms", []).append(cold["process_ms"] - model_ms)
                row.setdefault("cold_cpu_ms", []).append(cold["cpu_ms"])
                row.setdefault("import_ms", []).append(cold["import_ms"])
                row.setdefault("warm_overhead_ms", []).append(median(cold["warm_ms"]) - model_ms)
                row.setdefault("warm_cpu_ms", []).append(median(cold["warm_cpu_ms"]))
                row.setdefault("peak_rss_mb", []).append(cold["peak_rss_mb"])
            for label in order:
                restored = restorers[label]()
                samples[label].setdefault("restored_ms", []).append(restored["restored_ms"] - model_ms)
                samples[label].setdefault("restored_cpu_ms", []).append(restored["cpu_ms"])
                samples[label].setdefault("restore_hooks_ms", []).append(restored["hooks_ms"])
        if first and runs > 1:  # not in the smoke run: a minute or two under valgrind
            for label, tree in trees.items():
                try:
                    counted = instructions(tree, envs[label])
                except (RuntimeError, subprocess.TimeoutExpired) as exc:  # a figure less, not the section
                    out.setdefault("instructions_failed", {})[label] = str(exc)[-300:]
                    continue
                if counted is not None:
                    out.setdefault("instructions_m", {})[label] = counted
        if first:  # what a cold start compiles: once per tree, untimed
            for label, tree in trees.items():
                checked = run_cold(tree, groups[label, "cold"], envs[label], mode="check", turns=0)
                into = out.setdefault("bedrock_check", {}) if label == "bedrock" else None
                for key, value in (
                    ("compiled", checked["compiled"]),
                    ("read_twice", checked["read_twice"]),
                    ("files_opened", checked["opened"]),
                    ("generated", checked.get("generated", {})),
                    ("codecache", checked.get("codecache")),
                ):
                    if into is not None:  # apart: the section's check line compares this tree with main
                        into[key] = value
                    else:
                        out.setdefault(key, {})[label] = value
    row_out: dict[str, Any] = {"cpu_share": cpu_share(size)}
    for label, values in samples.items():
        row_out[label] = {key: {"median": median(v), "samples": v} for key, v in values.items()}
    warm = row_out["here"]["warm_overhead_ms"]["median"]
    row_out["gb_s_per_turn"] = size / 1024 * (MODEL_CALLS_PER_TURN * 1.0 + warm / 1000)
    return row_out


def profile(size: int, bedrock: bool = False) -> str:
    """Where a cold start of this tree's artefacts spends its time at ``size``: ``import app`` and the first turn
    under pyinstrument, in the cgroup (the model's 2 x 300 ms show as waits); with ``bedrock``, the Bedrock-only
    chain's."""
    import sysconfig

    from tests.support.fake_bedrock import FakeBedrock
    from tests.support.fake_llm import FakeLLM
    from tests.support.wire_models import realistic, realistic_bedrock

    python = _lambda_python()
    assert python is not None and not available()
    with (
        tempfile.TemporaryDirectory(prefix="chatloop-lambda-profile-") as tmp,
        FakeLLM() as llm,
        FakeBedrock(verify=False) as aws,
    ):
        llm.default = lambda body: replace(realistic(body), delay=MODEL_SECONDS)
        aws.default = lambda body: replace(realistic_bedrock(body), delay=MODEL_SECONDS)
        work = Path(tmp)
        work.chmod(0o755)
        paths = [
            str(artefacts.function(ROOT / "src", work / "task")),
            str(artefacts.layer(ROOT / "requirements.txt") / "python"),
        ]
        tree = Tree("here", paths, python, work)
        # pyinstrument alone (it has no dependencies): the venv's other packages stay off the child's path
        only = work / "profiler"
        only.mkdir()
        (only / "pyinstrument").symlink_to(Path(sysconfig.get_path("platlib")) / "pyinstrument")
        chain = (
            _bedrock_environment(size, aws, tmp) if bedrock else _environment(size, llm.groq_base_url, tmp)
        )
        env = {**chain, "BENCH_SITE_PACKAGES": str(only)}
        with LambdaCgroup(f"chatloop-profile-{os.getpid()}", size) as group:
            out = run_cold(tree, group, env, mode="profile", turns=0)
    text: str = out["profile"]
    return text


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--profile", type=int, metavar="MB", help="print a cold start's profile at this size")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument(
        "--no-bedrock", action="store_true", help="leave out the Bedrock-only chain's run (issue #43)"
    )
    parser.add_argument(
        "--chain", choices=("groq", "bedrock"), default="groq", help="the chain --profile runs"
    )
    parser.add_argument("--turns", type=int, default=3, help="warm turns after each cold start")
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)))
    parser.add_argument(
        "--base", default=None, help="the commit to measure against (default: the previous main)"
    )
    parser.add_argument(
        "--write",
        type=Path,
        metavar="RESULTS_MD",
        help="put the section into this RESULTS.md (and the results into results.json beside it)",
    )
    args = parser.parse_args()
    if args.profile:
        print(profile(args.profile, bedrock=args.chain == "bedrock"))
        return 0
    sizes = tuple(int(s) for s in args.sizes.split(","))
    results = measure(args.runs, args.turns, sizes, args.base, bedrock=not args.no_bedrock)
    if args.write:
        write_section(args.write, results)
        print(f"bench: wrote section 13 of {args.write}", file=sys.stderr)
    else:
        print(json.dumps(results, indent=2))
    return 0


def write_section(results_md: Path, results: dict[str, Any]) -> None:
    """Section 13 of ``results_md`` replaced by ``results``' (``make bench SECTION=lambda_size``: this step alone;
    the other sections stay as the last full run wrote them), and ``results.json`` beside it updated."""
    from datetime import UTC, datetime

    from bench.report import lambda_size_section

    section = lambda_size_section(results)
    section[2:2] = [
        f"(Measured on its own, {datetime.now(UTC):%Y-%m-%d %H:%M UTC}: `make bench SECTION=lambda_size`.)",
        "",
    ]
    lines = results_md.read_text().splitlines() if results_md.exists() else []
    start = next(
        (i for i, line in enumerate(lines) if line.startswith("## ") and "Lambda-sized" in line), None
    )
    if start is None:  # before the section that follows it, else at the end
        start = end = next((i for i, line in enumerate(lines) if line.startswith("## 14.")), len(lines))
    else:
        end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    lines[start:end] = section
    results_md.write_text("\n".join(lines).rstrip("\n") + "\n")
    saved = results_md.with_name("results.json")
    everything = json.loads(saved.read_text()) if saved.exists() else {}
    everything["lambda_size"] = results
    saved.write_text(json.dumps(everything, indent=2, default=str) + "\n")


if __name__ == "__main__":
    sys.exit(main())
