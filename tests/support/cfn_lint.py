"""cfn-lint over several templates in one run: its start-up and schema loading are most of a run's time (~2 s of
CPU each), so the per-mode tests share one run and each reads its own template's findings.

Usage::

    found = lint_each({("stream", "arm64"): template, ...}, tmp_folder, ignore=("W2001",))
    assert found[("stream", "arm64")] == []
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Hashable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

CFN_LINT = Path(sys.executable).parent / "cfn-lint"
K = TypeVar("K", bound=Hashable)


def lint_each(
    templates: Mapping[K, dict[str, Any]], folder: Path, ignore: Sequence[str] = ()
) -> dict[K, list[str]]:
    """cfn-lint's findings (``--format parseable`` lines) for each of ``templates``, written to ``folder`` as
    JSON, from one cfn-lint run over them all."""
    paths = {key: folder / f"template-{n}.json" for n, key in enumerate(templates)}
    for key, path in paths.items():
        path.write_text(json.dumps(templates[key]))
    ignoring = ["--ignore-checks", *ignore] if ignore else []
    result = subprocess.run(
        [str(CFN_LINT), "--format", "parseable", *ignoring, "--", *map(str, paths.values())],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    lines = result.stdout.splitlines()
    found = {key: [line for line in lines if line.startswith(f"{path}:")] for key, path in paths.items()}
    # A non-zero exit with no finding for any template is cfn-lint failing, never a pass.
    assert result.returncode == 0 or any(found.values()), result.stdout + result.stderr
    return found
