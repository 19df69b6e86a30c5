"""Cold start: ``import app`` as on Lambda (built zips, read-only, with and without bytecode) and from the venv."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from bench import ROOT
from bench.common import median


def measure(reps: int) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}

    def timed(statement: str) -> float:
        code = (
            f"import time, sys; t = time.perf_counter(); {statement}; "
            "print((time.perf_counter() - t) * 1000, file=sys.stderr)"
        )
        result = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        )
        return float(result.stderr.strip().splitlines()[-1])

    check = subprocess.run(
        [
            sys.executable,
            "-c",
            "import app, sys; print(sorted(m for m in ('groq', 'openai', 'boto3', "
            "'fastapi') if m in sys.modules))",
        ],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    lambda_layout = lambda_layout_import(max(1, reps // 2))
    return {
        **lambda_layout,
        "app_ms": median([timed("import app") for _ in range(reps)]),
        "app_groq_ms": median([timed("import app; import groq") for _ in range(max(1, reps // 2))]),
        "app_openai_ms": median([timed("import app; import openai") for _ in range(max(1, reps // 2))]),
        "heavy_modules_after_import": check.stdout.strip().splitlines()[-1],
    }


def lambda_layout_import(reps: int) -> dict:
    """``import app`` as on Lambda: the runtime's bare interpreter, the built function and layer (unpacked read-only,
    ``bench/artefacts.py``) on sys.path, no bytecode written: with the shipped .pyc files, and without them (a
    ``pycache_prefix`` where there is none: every module compiled from source, the standard library's too)."""
    import tempfile

    from bench import artefacts

    if sys.version_info[:2] != (3, 12):
        return {"lambda_ms": None, "lambda_nopyc_ms": None}
    base = str(Path(sys.base_prefix) / "bin" / "python3.12")
    with tempfile.TemporaryDirectory() as tmp:
        paths = [
            str(artefacts.function(ROOT / "src", Path(tmp) / "task")),
            str(artefacts.layer(ROOT / "requirements.txt") / "python"),
        ]

        def timed_import(*flags: str) -> float:
            code = (
                "import sys, time; sys.path[:0] = sys.argv[1:]; t = time.perf_counter(); import app; "
                "print((time.perf_counter() - t) * 1000, file=sys.stderr)"
            )
            # -B, not PYTHONDONTWRITEBYTECODE: -I ignores PYTHON* variables, and a written .pyc would void the
            # "from sources" figure after its first run.
            out = subprocess.run(
                [base, "-I", "-B", *flags, "-c", code, *paths],
                capture_output=True,
                text=True,
                check=True,
                env={"PATH": "/usr/bin:/bin"},
            )
            return float(out.stderr.strip().splitlines()[-1])

        with_pyc = median([timed_import() for _ in range(reps)])
        without = median([timed_import("-X", f"pycache_prefix={tmp}/no-pycache") for _ in range(reps)])
    return {"lambda_ms": with_pyc, "lambda_nopyc_ms": without}
