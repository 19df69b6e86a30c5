"""A retried request with an Idempotency-Key, replayed from its stored answer, against a fresh turn (median ms).

Both go through the Lambda handler; the turn is the warm end-to-end calculation (two model calls over loopback
HTTP through the groq SDK, one sandbox run). DynamoDB is moto in-process here: the replay's figure is the
handler's own cost of a lookup, not DynamoDB's network latency (single-digit milliseconds in a region).
"""

from __future__ import annotations

import os
import time
import uuid

from bench.common import median


def measure(reps: int, js_tool) -> dict:
    import boto3
    from moto import mock_aws
    from scripts.invoke_local import LocalContext
    from tests.support.events import rest_event
    from tests.support.fake_llm import FakeLLM
    from tests.support.wire_models import realistic

    import app as lambda_app
    from chatloop.api.runtime import Runtime
    from chatloop.config import Settings
    from chatloop.tools.base import ToolRegistry

    saved = {
        k: os.environ.get(k) for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION")
    }
    os.environ.update(
        {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench", "AWS_DEFAULT_REGION": "us-east-1"}
    )
    fresh: list[float] = []
    replayed: list[float] = []
    try:
        with mock_aws(), FakeLLM() as llm:
            boto3.client("dynamodb").create_table(
                TableName="bench-idempotency",
                KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
                AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
                BillingMode="PAY_PER_REQUEST",
            )
            llm.default = realistic
            os.environ["GROQ_BASE_URL"] = llm.groq_base_url
            lambda_app.app.state.runtime = Runtime(
                Settings(
                    model_chain="groq:llama-3.3-70b-versatile", idempotency_table_name="bench-idempotency"
                ),
                registry=ToolRegistry([js_tool]),
                keys_loader=lambda s: {"groq": "gsk_bench_key_0000000000"},
            )
            body = {"messages": [{"role": "user", "content": "calculate 5!"}], "stream": False}
            for _ in range(reps):
                event = rest_event("POST", "/chat", body)
                event["headers"]["Idempotency-Key"] = key = str(uuid.uuid4())
                event["multiValueHeaders"]["Idempotency-Key"] = [key]
                time.sleep(0.03)  # the sandbox's spare is refilled between turns, as between real requests
                for timings in (fresh, replayed):  # the first runs the turn; the retry is replayed
                    start = time.perf_counter()
                    response = lambda_app.handler(event, LocalContext())
                    timings.append((time.perf_counter() - start) * 1000)
                    assert response["statusCode"] == 200 and "120" in response["body"], response
    finally:
        os.environ.pop("GROQ_BASE_URL", None)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return {"fresh_ms": median(fresh), "replayed_ms": median(replayed), "turns": len(fresh)}
