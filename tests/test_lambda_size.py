"""The built artefacts at Lambda's smallest size this template allows: 512 MB and 0.29 of a vCPU (a cgroup v1 cpu
quota and memory limit, as bench/lambda_size.py sets them), `python3.12 -I` with only the layer and the function on
sys.path: `import app` works and the handler answers a calculation turn, plain and after the SnapStart hooks."""

from __future__ import annotations

import os
import platform
from pathlib import Path
from types import ModuleType

import pytest

from tests.support.fake_llm import FakeLLM
from tests.test_api import realistic

pytestmark = pytest.mark.slow  # builds the layer (pip) and starts the artefacts under a cgroup


def bench_lambda_size() -> ModuleType:
    """bench.lambda_size, without the bench package's environment settings leaking into the other tests."""
    saved = dict(os.environ)
    try:
        from bench import lambda_size
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return lambda_size


@pytest.fixture(scope="module")
def artefacts(tmp_path_factory) -> list[str]:
    why = bench_lambda_size().available()
    if why:
        pytest.skip(f"Lambda-sized runs need cgroups: {why}")
    from scripts.package import build_function, build_layer

    build = tmp_path_factory.mktemp("build")
    build_layer("arm64" if platform.machine() in ("aarch64", "arm64") else "x86_64", build)
    build_function(build)
    return [str(build / "function"), str(Path(build) / "layer" / "python")]


@pytest.mark.parametrize("mode", ["cold", "restore"])
def test_the_built_artefacts_answer_a_turn_at_512_mb_and_a_third_of_a_core(artefacts, mode):
    lambda_size = bench_lambda_size()
    python = lambda_size._lambda_python()
    assert python is not None
    with FakeLLM() as llm:
        llm.default = realistic
        out = lambda_size.run_once(python, artefacts, 512, mode, 1, llm.groq_base_url)
    # the child asserts each turn's 200 and its result (20789.28); these are its own measurements
    assert out["import_ms"] > 0 and out["peak_rss_mb"] < 512
    if mode == "restore":
        assert "after_restore_ms" in out
