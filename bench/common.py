"""What several measurements share: statistics, the snippets, and instant scripted models and tools."""

from __future__ import annotations

import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench import ROOT
from chatloop.providers.base import ModelRequest, ModelResponse, ToolCall
from chatloop.tools.base import ToolResult

TRIVIAL = "1 + 1"


COMPOUND_SNIPPET = (
    "let balance = 10000; const monthly = 0.05 / 12;\n"
    "for (let m = 0; m < 360; m++) balance *= 1 + monthly;\n"
    "console.log('years', 30); console.log('rate', 0.05); console.log('months', 360);\n"
    "Math.round(balance * 100) / 100"
)


def tree_at(commit: str, dest: Path) -> Path:
    """This repository's files at ``commit``, written under ``dest`` (which is made): a tree to measure against."""
    dest.mkdir(parents=True, exist_ok=True)
    git = shutil.which("git") or "/usr/bin/git"
    archive = subprocess.run([git, "archive", commit], cwd=ROOT, capture_output=True, check=True)
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(dest, filter="data")
    return dest


def child_values(tree: Path, code: str, *args: str, stdin: str | None = None) -> dict[str, Any]:
    """Runs ``code`` in a fresh interpreter with ``tree``'s sources on the path (a tree of another commit, say) and
    returns the JSON object its last line prints::

        values = child_values(tree_at("HEAD~1", tmp), CHILD, "200")
    """
    result = subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=tree,
        input=stdin,
        env={
            "PYTHONPATH": f"{tree / 'src'}:{tree}",
            "PATH": "/usr/bin:/bin",
            "POWERTOOLS_METRICS_NAMESPACE": "Bench",
        },
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(f"bench child failed in {tree}: {result.stderr[-2000:]}")
    values: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return values


def median(values: list[float]) -> float:
    return statistics.median(values)


def p90(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))]


class InstantModel:
    """Calls the no-op tool ``tool_rounds`` times (different arguments each time), then answers."""

    name = "scripted:instant"

    def __init__(self, tool_rounds: int):
        self.tool_rounds = tool_rounds

    async def stream(self, request: ModelRequest):
        done = sum(
            1 for m in request.messages if m["role"] == "tool" and m["tool_call_id"].startswith("noop")
        )
        if request.tools and done < self.tool_rounds:
            yield ModelResponse(
                self.name, tool_calls=[ToolCall(f"noop{done}", "noop", json.dumps({"n": done}))]
            )
        else:
            yield ModelResponse(self.name, content="done", finish_reason="stop")


class AnswerAtOnce:
    """A model that answers at once, without tools: what remains is the handler's own cost."""

    name = "scripted:instant"

    async def stream(self, request: ModelRequest):
        yield ModelResponse(self.name, content="ok", finish_reason="stop")


class NoopTool:
    name, description = "noop", "does nothing"
    parameters = {"type": "object", "properties": {"n": {"type": "integer"}}}

    async def run(self, arguments, deadline):
        return ToolResult(json.dumps({"result": arguments.get("n")}), ok=True)


@contextmanager
def fake_aws_credentials() -> Iterator[None]:
    """Fake AWS credentials and region in the environment (no AWS_ENDPOINT_URL) for the block, what was there
    before put back after."""
    names = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL")
    saved = {k: os.environ.get(k) for k in names}
    os.environ.update(
        {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench", "AWS_DEFAULT_REGION": "us-east-1"}
    )
    os.environ.pop("AWS_ENDPOINT_URL", None)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextmanager
def mocked_dynamodb(table: str) -> Iterator[str]:
    """A moto DynamoDB (in-process) with the store's table ``table``, fake credentials set for its life."""
    import boto3
    from moto import mock_aws

    from chatloop.store.dynamodb_layout import create_table

    with fake_aws_credentials(), mock_aws():
        create_table(boto3.client("dynamodb", region_name="us-east-1"), table)
        yield table
