"""``make deploy``'s parameter overrides (scripts/deploy_params.py, run as the Makefile runs it): a Bedrock-only chain
deploys with no secret and the role granted the chain's models; a chain naming a Bedrock model the role would not
be granted, or ids the template refuses, stop the deploy with the reason; what is used is printed."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support.cfn import evaluate, parameter_values, resolve
from tests.support.repo import ROOT

SECRET = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:chatloop/provider-keys-AbCdEf"
BEDROCK_CHAIN = "bedrock:us.anthropic.claude-haiku-4-5-20251001-v1:0,bedrock:amazon.nova-lite-v1:0"


def deploy_params(*args: str, params: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "scripts/deploy_params.py",
            "--mode",
            "stream",
            "--arch",
            "arm64",
            *args,
            "--",
            *params,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def as_overrides(stdout: str) -> dict[str, str]:
    return dict(word.split("=", 1) for word in stdout.split())


def test_a_bedrock_only_chain_deploys_without_a_secret_and_grants_the_chains_models(translated):
    result = deploy_params("--model-chain", BEDROCK_CHAIN)
    assert result.returncode == 0, result.stderr
    given = as_overrides(result.stdout)
    assert "ProviderKeysSecretArn" not in given and given["ModelChain"] == BEDROCK_CHAIN
    assert given["BedrockModelIds"] == "us.anthropic.claude-haiku-4-5-20251001-v1:0,amazon.nova-lite-v1:0"
    assert "provider keys secret: not given" in result.stderr and "warning" not in result.stderr
    assert "Bedrock models the role may invoke" in result.stderr
    # deployed with exactly these overrides (a new stack: every other parameter its default), the role may invoke
    # each model of the chain and the function is given no secret to read
    resources = resolve(translated, given)["Resources"]
    statements = resources["ChatFunctionPolicy"]["Properties"]["PolicyDocument"]["Statement"]
    (bedrock,) = [s for s in statements if "bedrock:InvokeModel" in s["Action"]]
    arns = evaluate(bedrock["Resource"], parameter_values(translated, given))
    assert "arn:aws:bedrock:us-east-1::foundation-model/amazon.nova-lite-v1:0" in arns
    assert any(a.endswith(":inference-profile/us.anthropic.claude-haiku-4-5-20251001-v1:0") for a in arns)
    assert not [s for s in statements if "secretsmanager:GetSecretValue" in s["Action"]]


@pytest.mark.parametrize(
    ("args", "params", "named"),
    [
        (
            ("--model-chain", BEDROCK_CHAIN, "--bedrock-models", "amazon.nova-lite-v1:0"),
            (),
            "bedrock:us.anthropic",
        ),
        (
            ("--model-chain", "bedrock:amazon.nova-lite-v1:0"),
            ("BedrockModelIds=amazon.nova-micro-v1:0",),
            "nova-lite",
        ),
        (("--bedrock-models", "amazon.*"), (), "BEDROCK_MODELS='amazon.*'"),
        (("--model-chain", "bedrock:anthropic.claude v1"), (), "BEDROCK_MODELS"),
    ],
)
def test_a_deploy_the_role_could_not_serve_stops_with_the_reason(args, params, named):
    result = deploy_params(*args, params=params)
    assert result.returncode == 1 and result.stdout == ""
    assert named in result.stderr and "make deploy:" in result.stderr


def test_the_secret_is_passed_when_given_removed_with_none_and_left_alone_otherwise():
    assert as_overrides(deploy_params("--secret-arn", SECRET).stdout)["ProviderKeysSecretArn"] == SECRET
    removed = deploy_params("--secret-arn", "none")
    assert as_overrides(removed.stdout)["ProviderKeysSecretArn"] == ""
    assert "provider keys secret: none" in removed.stderr
    assert "ProviderKeysSecretArn" not in as_overrides(deploy_params().stdout)


def test_a_chain_that_needs_keys_without_a_secret_is_warned_about():
    result = deploy_params("--model-chain", "groq:llama-3.3-70b-versatile,bedrock:amazon.nova-lite-v1:0")
    assert result.returncode == 0
    assert "warning: groq models need keys" in result.stderr
    with_secret = deploy_params("--model-chain", "groq:llama-3.3-70b-versatile", "--secret-arn", SECRET)
    assert "warning" not in with_secret.stderr


def test_params_win_and_are_not_passed_twice():
    """PARAMS go to the deploy as given (the Makefile appends them): what they set is not overridden here too."""
    params = (
        "ModelChain=bedrock:amazon.nova-lite-v1:0",
        "BedrockModelIds=amazon.nova-lite-v1:0",
        "MaxIterations=6",
    )
    result = deploy_params(params=params)
    assert result.returncode == 0, result.stderr
    assert as_overrides(result.stdout) == {"ResponseMode": "stream", "Architecture": "arm64"}
    assert "model chain: bedrock:amazon.nova-lite-v1:0" in result.stderr
