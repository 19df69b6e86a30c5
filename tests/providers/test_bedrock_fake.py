"""The fake Bedrock Runtime (tests/support/fake_bedrock.py) checked with a plain boto3 ``bedrock-runtime`` client: what
the provider's tests rely on is what botocore itself parses (event-stream frames, errors, SigV4)."""

from __future__ import annotations

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError, EventStreamError

from tests.support.fake_bedrock import cut, error, text, tool_use

NOVA = "amazon.nova-lite-v1:0"


def plain_client(**credentials: str):
    config = Config(retries={"total_max_attempts": 1})
    return boto3.session.Session(**credentials).client("bedrock-runtime", config=config)


def test_boto3_reads_the_fakes_stream_answer_and_errors_and_the_fake_checks_the_signature(fake_bedrock):
    fake_bedrock.script(
        NOVA,
        text("Hello there", usage=(12, 3)),
        tool_use([("tu_1", "execute_javascript", '{"code": "1+1"}')]),
        cut(text("abcdef"), after=2, exception="throttlingException"),
        error(429, "ThrottlingException", "Too many requests, please wait before trying again."),
    )
    client = plain_client()
    events = list(
        client.converse_stream(modelId=NOVA, messages=[{"role": "user", "content": [{"text": "hi"}]}])[
            "stream"
        ]
    )
    assert (
        "".join(e["contentBlockDelta"]["delta"]["text"] for e in events if "contentBlockDelta" in e)
        == "Hello there"
    )
    assert events[-1]["metadata"]["usage"]["inputTokens"] == 12
    answer = client.converse(modelId=NOVA, messages=[{"role": "user", "content": [{"text": "hi"}]}])
    assert answer["stopReason"] == "tool_use"
    assert answer["output"]["message"]["content"][0]["toolUse"]["input"] == {"code": "1+1"}
    stream = client.converse_stream(modelId=NOVA, messages=[{"role": "user", "content": [{"text": "hi"}]}])[
        "stream"
    ]
    with pytest.raises(EventStreamError) as cut_stream:
        list(stream)
    assert cut_stream.value.response["Error"]["Code"] == "throttlingException"
    with pytest.raises(ClientError) as throttled:
        client.converse(modelId=NOVA, messages=[{"role": "user", "content": [{"text": "hi"}]}])
    assert throttled.value.response["Error"]["Code"] == "ThrottlingException"
    assert [r["signed"] for r in fake_bedrock.requests] == [True] * 4
    assert fake_bedrock.requests[0]["model"] == NOVA

    # Signed with another secret: refused as AWS refuses it, and recorded as unsigned.
    stranger = plain_client(aws_access_key_id=fake_bedrock.access_key, aws_secret_access_key="not-the-secret")
    with pytest.raises(ClientError) as refused:
        stranger.converse(modelId=NOVA, messages=[{"role": "user", "content": [{"text": "hi"}]}])
    assert refused.value.response["Error"]["Code"] == "InvalidSignatureException"
    assert fake_bedrock.requests[-1]["signed"] is False
