"""The built artefacts at Lambda's smallest size this template allows: 512 MB and 0.29 of a vCPU (a cgroup, as
bench/lambda_size.py sets it), `python3.12 -I -B` with only the layer and the function (unpacked read-only) on
sys.path: the handler answers a calculation turn cold and in a copy forked from a snapshot-primed process, and a cold
start compiles no module from source (every one ships its bytecode)."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from types import ModuleType

import pytest

from tests.support.fake_llm import FakeLLM
from tests.support.wire_models import realistic

pytestmark = pytest.mark.slow  # builds the layer (pip, cached in bench/.cache) and starts it under a cgroup


def bench_module(name: str) -> ModuleType:
    """A bench module, without the bench package's environment settings leaking into the other tests."""
    import importlib

    saved = dict(os.environ)
    try:
        return importlib.import_module(f"bench.{name}")
    finally:
        os.environ.clear()
        os.environ.update(saved)


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    lambda_size = bench_module("lambda_size")
    why = lambda_size.available()
    if why:
        pytest.skip(f"Lambda-sized runs need cgroups: {why}")
    artefacts = bench_module("artefacts")
    work = tmp_path_factory.mktemp("lambda")
    home = work / "home"
    home.mkdir()
    home.chmod(0o1777)
    paths = [
        str(artefacts.function(artefacts.ROOT / "src", work / "task")),
        str(artefacts.layer(artefacts.ROOT / "requirements.txt") / "python"),
    ]
    return lambda_size.Tree("here", paths, lambda_size._lambda_python(), home)


def test_the_built_artefacts_answer_cold_and_after_a_restore_at_512_mb(tree):
    lambda_size = bench_module("lambda_size")
    cgroups = bench_module("cgroups")
    with FakeLLM() as llm:
        llm.default = lambda body: replace(realistic(body), delay=0.05)
        env = lambda_size._environment(512, llm.groq_base_url, str(tree.home))
        name = f"chatloop-test-{os.getpid()}"
        with cgroups.LambdaCgroup(f"{name}-cold", 512) as cold_group:
            # the child asserts each turn's 200 and its result (20789.28); these are its own measurements
            cold = lambda_size.run_cold(tree, cold_group, env, mode="check", turns=1)
        with (
            cgroups.LambdaCgroup(f"{name}-primed", 512) as primed_group,
            lambda_size.primed(tree, primed_group, env) as restore,
        ):
            restored = [restore(), restore()]  # two copies of one snapshot
    assert cold["compiled"] == []  # every module the cold start imported came with its bytecode
    assert cold["opened"] > 100 and cold["read_twice"] == []  # and no file of the artefacts was read twice
    # what dataclasses, typing and re compile as modules load came from the built function's table (chatloop.codecache)
    assert cold["codecache"]["misses"] == 0 and cold["codecache"]["hits"] > 1000
    assert "dataclasses" not in cold["generated"] and "typing" not in cold["generated"]
    assert 0 < cold["peak_rss_mb"] < 512 and cold["process_ms"] > cold["import_ms"] > 0
    for copy in restored:
        assert copy["restored_ms"] > 0 and len(copy["warm_ms"]) == 1
    # the turns ran through the SDK with the key read after each restore (the env's, here)
    assert {r["headers"].get("Authorization") for r in llm.requests} == {f"Bearer {env['GROQ_API_KEY']}"}


def test_a_module_without_bytecode_fails_the_build_check(tmp_path):
    from scripts.package import compile_bytecode, missing_bytecode

    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "mod.py").write_text("VALUE = 1\n")
    (tmp_path / "pkg" / "template.py").write_text("{% if x %}\n")  # shipped, never importable
    assert missing_bytecode(tmp_path) == ["pkg/mod.py"]
    compile_bytecode(tmp_path)
    assert missing_bytecode(tmp_path) == []
    cached = Path(tmp_path / "pkg" / "__pycache__" / "mod.cpython-312.pyc")
    cached.write_bytes(cached.read_bytes()[:4] + (3).to_bytes(4, "little") + cached.read_bytes()[8:])
    assert missing_bytecode(tmp_path) == ["pkg/mod.py"]  # a checked-hash .pyc: checked on every start


def test_the_section_alone_replaces_its_own_part_of_results_md_and_results_json(tmp_path):
    """``make bench SECTION=lambda_size``: the section measured alone goes where the full run put it; the other
    sections and results stay as the last full run wrote them."""
    import json

    lambda_size = bench_module("lambda_size")
    results_md, saved = tmp_path / "RESULTS.md", tmp_path / "results.json"
    results_md.write_text(
        "# Benchmark results\n\n## 11. The chat page\n\npage\n\n"
        "## 12. Lambda-sized: the built artefacts at 512 / 1,024 / 1,769 MB\n\nold numbers\n\n"
        "## 14. Time to first token\n\nttft\n"
    )
    saved.write_text(json.dumps({"page": {"kept": True}, "lambda_size": {"old": True}}))
    lambda_size.write_section(results_md, {"skipped": "no cgroups here"})
    text = results_md.read_text()
    assert "old numbers" not in text and "Skipped: no cgroups here." in text
    assert text.index("## 11.") < text.index("## 13. Lambda-sized") < text.index("## 14.") and "ttft" in text
    assert text.count("Lambda-sized") == 1
    assert json.loads(saved.read_text()) == {
        "page": {"kept": True},
        "lambda_size": {"skipped": "no cgroups here"},
    }
    results_md.write_text("# Benchmark results\n\n## 14. Time to first token\n")  # no section yet: before 14
    lambda_size.write_section(results_md, {"skipped": "again"})
    assert results_md.read_text().index("## 13.") < results_md.read_text().index("## 14.")


def test_a_bedrock_only_chain_answers_cold_and_after_a_restore_at_512_mb(tree):
    """Issue #43's cold path: the same turn with ``MODEL_CHAIN=bedrock:...`` from the fake Bedrock Runtime, boto3 from
    the layer, signed with the environment's credentials, SnapStart's priming loading its service model."""
    from tests.support.fake_bedrock import FakeBedrock
    from tests.support.wire_models import realistic_bedrock

    lambda_size = bench_module("lambda_size")
    cgroups = bench_module("cgroups")
    with FakeBedrock() as aws:  # signatures checked: a request signed otherwise gets a 403 and the turn fails
        aws.default = lambda body: replace(realistic_bedrock(body), delay=0.05)
        env = lambda_size._bedrock_environment(512, aws, str(tree.home))
        name = f"chatloop-test-{os.getpid()}-bedrock"
        with cgroups.LambdaCgroup(f"{name}-cold", 512) as cold_group:
            cold = lambda_size.run_cold(tree, cold_group, env, mode="check", turns=1)
        with (
            cgroups.LambdaCgroup(f"{name}-primed", 512) as primed_group,
            lambda_size.primed(tree, primed_group, env) as restore,
        ):
            restored = restore()
    assert (
        cold["compiled"] == [] and cold["read_twice"] == []
    )  # botocore's modules and data: bytecode, read once
    # the patterns urllib3 and botocore compile as they load came from the shipped tables (the later one): 98 missed
    # without boto3 in it; what is left are the few botocore compiles on its first call (a host label, a URI path)
    assert cold["codecache"]["misses"] < 10 and cold["codecache"]["hits"] > 1000
    assert restored["restored_ms"] > 0 and len(restored["warm_ms"]) == 1
    streamed = [r for r in aws.requests if r["operation"] == "converse-stream"]
    assert len(streamed) == 2 * (2 + 2)  # two model calls a turn: two turns cold, two in the restored copy
    assert all(r["signed"] and r["model"] == lambda_size.BEDROCK_MODEL for r in aws.requests)


def test_the_section_compares_the_bedrock_only_chain_with_this_trees_groq_chain():
    """Issue #43's line: the Bedrock-only chain's figures beside the Groq chain's of the same run (main has no
    ``bedrock:`` provider to compare with), and no Bedrock table when the run had none (the smoke run)."""
    from bench.report import lambda_size_section

    def row(cold: float, restored: float) -> dict:
        keys = ("cold_ms", "restored_ms", "cold_cpu_ms", "restored_cpu_ms", "warm_overhead_ms", "warm_cpu_ms")
        figures = {k: {"median": cold if k.startswith("cold") else restored} for k in keys}
        return {**figures, "import_ms": {"median": 500.0}, "peak_rss_mb": {"median": 50.0}}

    results = {
        "cgroup": "v2",
        "model_seconds": 0.3,
        "runs": 5,
        "base_commit": "abcdef0",
        "targets_at_512": {"cold_ms": 1200.0, "restored_ms": 400.0, "warm_overhead_ms": 20.0},
        "instructions_m": {"here": 1000.0, "base": 1000.0, "bedrock": 1100.0},
        "sizes": {
            "512": {
                "cpu_share": 0.29,
                "gb_s_per_turn": 1.0,
                "here": row(1000.0, 40.0),
                "base": row(1000.0, 40.0),
                "bedrock": row(1150.0, 60.0),
            }
        },
    }
    text = "\n".join(lambda_size_section(results))
    bedrock = next(line for line in text.splitlines() if "| `bedrock:` |" in line)
    assert "**1150 ms (1000; ×1.15)**" in bedrock and "**60 ms (40; ×1.50)**" in bedrock
    assert "1,100 M (the Groq chain's 1,000 M; ×1.10)" in text
    del results["sizes"]["512"]["bedrock"]
    assert "Bedrock-only" not in "\n".join(lambda_size_section(results))
