"""Fixtures the deployment tests share: the SAM template as translated."""

import json
import sys

import pytest


@pytest.fixture(scope="module")
def translated(tmp_path_factory) -> dict:
    """template.yaml as SAM translates it (scripts/translate_template.py), as JSON. Used by tests/ops/test_deployment.py and
    tests/ops/test_template_snapstart.py."""
    from tests.support.repo import run

    target = tmp_path_factory.mktemp("cfn") / "template.json"
    run(sys.executable, "scripts/translate_template.py", "template.yaml", str(target))
    return json.loads(target.read_text())
