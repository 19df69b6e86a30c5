"""Amazon Bedrock in the template (#43): the role may invoke exactly the models and inference profiles
``BedrockModelIds`` names (a profile with the foundation models it routes to), and nothing when it names none; the
provider keys secret is optional, so a Bedrock-only stack carries no secret, no grant to read one and no variable
naming one. Checked on SAM's translation resolved for given parameter values, in both response modes (they share
ChatFunctionPolicy)."""

from __future__ import annotations

import copy
import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chatloop.config import Settings
from tests.support.cfn import TRANSLATION_WARNINGS, evaluate, parameter_values, resolve, the_function
from tests.support.cfn_lint import lint_each
from tests.support.events import rest_event
from tests.support.fake_llm import text
from tests.support.handler import build_runtime, invoke, serving

MODES = ("stream", "buffered")
INVOKE = ["bedrock:InvokeModel", "bedrock:InvokeModelWithResponseStream"]
GEOGRAPHIES = ("us", "eu", "apac", "us-gov", "jp", "au", "global")
SECRET = "arn:aws:secretsmanager:us-east-1:123456789012:secret:chatloop/provider-keys-AbCdEf"


def expected_arns(ids: list[str], values: dict[str, str]) -> list[str]:
    """What AWS documents a caller needs for each id: a foundation model's ARN in the stack's Region; for a
    cross-Region inference profile, the profile's ARN in the stack's Region and account and the foundation model
    it routes to, in any Region (Bedrock userguide, "Prerequisites for inference profiles")."""
    partition, region, account = values["AWS::Partition"], values["AWS::Region"], values["AWS::AccountId"]
    arns = []
    for model in ids:
        geography, _, routed = model.partition(".")
        if geography in GEOGRAPHIES and routed.count(".") == 1:
            arns.append(f"arn:{partition}:bedrock:{region}:{account}:inference-profile/{model}")
            arns.append(f"arn:{partition}:bedrock:*::foundation-model/{routed}")
        else:
            arns.append(f"arn:{partition}:bedrock:{region}::foundation-model/{model}")
    return sorted(arns)


def policy(translated: dict, parameters: dict[str, str]) -> list[dict]:
    resources = resolve(translated, parameters)["Resources"]
    return resources["ChatFunctionPolicy"]["Properties"]["PolicyDocument"]["Statement"]


def bedrock_grants(translated: dict, parameters: dict[str, str]) -> list[list[str]]:
    """The resources of each statement granting a bedrock: action, evaluated for ``parameters``."""
    values = parameter_values(translated, parameters)
    found = []
    for statement in policy(translated, parameters):
        if any(action.startswith("bedrock:") for action in statement["Action"]):
            assert statement["Action"] == INVOKE and statement["Effect"] == "Allow"
            found.append(sorted(evaluate(statement["Resource"], values)))
    return found


@pytest.mark.parametrize("mode", MODES)
def test_no_bedrock_model_named_no_bedrock_statement(translated, mode):
    assert translated["Parameters"]["BedrockModelIds"]["Default"] == ""
    assert bedrock_grants(translated, {"ResponseMode": mode}) == []
    assert "bedrock" not in str(policy(translated, {"ResponseMode": mode}))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    ("ids", "arns"),
    [
        ("amazon.nova-lite-v1:0", ["arn:aws:bedrock:us-east-1::foundation-model/amazon.nova-lite-v1:0"]),
        (
            "us.anthropic.claude-haiku-4-5-20251001-v1:0",
            [
                "arn:aws:bedrock:*::foundation-model/anthropic.claude-haiku-4-5-20251001-v1:0",
                "arn:aws:bedrock:us-east-1:123456789012:inference-profile/us.anthropic.claude-haiku-4-5-20251001-v1:0",
            ],
        ),
        (
            "global.amazon.nova-2-lite-v1:0,amazon.nova-micro-v1:0",
            [
                "arn:aws:bedrock:*::foundation-model/amazon.nova-2-lite-v1:0",
                "arn:aws:bedrock:us-east-1:123456789012:inference-profile/global.amazon.nova-2-lite-v1:0",
                "arn:aws:bedrock:us-east-1::foundation-model/amazon.nova-micro-v1:0",
            ],
        ),
    ],
)
def test_the_role_invokes_exactly_the_named_models_and_profiles(translated, mode, ids, arns):
    assert bedrock_grants(translated, {"ResponseMode": mode, "BedrockModelIds": ids}) == [arns]


EIGHT = ",".join(
    [
        "amazon.nova-lite-v1:0",
        "us.anthropic.claude-haiku-4-5-20251001-v1:0",
        "eu.amazon.nova-micro-v1:0",
        "apac.amazon.nova-pro-v1:0",
        "global.anthropic.claude-sonnet-4-5-20250929-v1:0",
        "meta.llama3-3-70b-instruct-v1:0",
        "us-gov.anthropic.claude-3-haiku-20240307-v1:0",
        "openai.gpt-oss-120b-1:0",
    ]
)


@pytest.mark.slow  # one cfn-lint run over four templates
def test_the_stack_as_deployed_with_and_without_bedrock_passes_cfn_lint(translated, tmp_path):
    """Every slot filled (models and profiles of each kind) with no secret, and no Bedrock model with a secret;
    the values given become the parameters' defaults, so cfn-lint checks what they resolve to."""
    cases = {}
    for mode in MODES:
        for ids in (EIGHT, ""):
            given = {
                "ResponseMode": mode,
                "BedrockModelIds": ids,
                "ProviderKeysSecretArn": "" if ids else SECRET,
            }
            cases[(mode, ids)] = copy.deepcopy(resolve(translated, given))  # the fixture is shared
            for name, value in given.items():
                cases[(mode, ids)]["Parameters"][name]["Default"] = value
    assert lint_each(cases, tmp_path, TRANSLATION_WARNINGS) == {case: [] for case in cases}


MODEL_ID = st.builds(
    "{}.{}".format,
    st.from_regex(r"[a-z0-9][a-z0-9-]{0,11}", fullmatch=True),
    st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_:-]{0,23}", fullmatch=True),
)
ANY_ID = st.one_of(MODEL_ID, st.builds("{}.{}".format, st.sampled_from(GEOGRAPHIES), MODEL_ID))


@settings(max_examples=60, deadline=None)
@given(
    ids=st.lists(ANY_ID, min_size=1, max_size=8),
    mode=st.sampled_from(MODES),
    where=st.sampled_from(
        [
            ("aws", "eu-west-1", "111122223333"),
            ("aws-cn", "cn-north-1", "210987654321"),
            ("aws-us-gov", "us-gov-west-1", "123456789012"),
        ]
    ),
)
def test_any_list_of_up_to_eight_ids_grants_exactly_its_models(translated, ids, mode, where):
    """Whatever ids (each one the parameter's pattern accepts) in whatever partition and Region: the grant is
    exactly the oracle's, partition, Region and account from the pseudo parameters, never a literal."""
    pattern = translated["Parameters"]["BedrockModelIds"]["AllowedPattern"]
    value = ",".join(ids)
    assert re.fullmatch(pattern, value)
    partition, region, account = where
    parameters = {
        "ResponseMode": mode,
        "BedrockModelIds": value,
        "AWS::Partition": partition,
        "AWS::Region": region,
        "AWS::AccountId": account,
    }
    assert bedrock_grants(translated, parameters) == [expected_arns(ids, parameters)]


@pytest.mark.parametrize(
    "value",
    [
        "*",  # a wildcard would grant every model
        "amazon.*",
        "arn:aws:bedrock:us-east-1::foundation-model/amazon.nova-lite-v1:0",  # ids, not ARNs
        "amazon.nova-lite-v1:0, amazon.nova-micro-v1:0",  # no spaces
        "amazon.nova-lite-v1:0,,amazon.nova-micro-v1:0",  # no empty entry
        "amazon.nova-lite-v1:0,",
        "xx.anthropic.claude-v1:0",  # not a geography this template knows: refused, never half-granted
        "us.anthropic.claude.v1:0",  # a model part with a dot: the routed model could not be taken apart
        "nova-lite",  # no provider
        ",".join(f"amazon.model-{n}" for n in range(9)),  # more ids than the template has slots for
    ],
)
def test_bedrock_model_ids_refuses_what_it_cannot_grant_exactly(translated, value):
    assert not re.fullmatch(translated["Parameters"]["BedrockModelIds"]["AllowedPattern"], value)


@pytest.mark.parametrize("mode", MODES)
def test_no_secret_named_no_secret_grant_and_no_secret_variable(translated, mode):
    """A Bedrock-only stack: ProviderKeysSecretArn empty (its default) leaves no secretsmanager statement and no
    PROVIDER_KEYS_SECRET_ARN; named, the function reads that one secret and nothing else."""
    assert translated["Parameters"]["ProviderKeysSecretArn"]["Default"] == ""
    bedrock_only = {"ResponseMode": mode, "BedrockModelIds": "amazon.nova-lite-v1:0"}
    env = the_function(resolve(translated, bedrock_only)["Resources"])["Environment"]["Variables"]
    assert "PROVIDER_KEYS_SECRET_ARN" not in env
    assert "secretsmanager" not in str(policy(translated, bedrock_only))
    with_secret = {"ResponseMode": mode, "ProviderKeysSecretArn": SECRET}
    env = the_function(resolve(translated, with_secret)["Resources"])["Environment"]["Variables"]
    assert env["PROVIDER_KEYS_SECRET_ARN"] == {"Ref": "ProviderKeysSecretArn"}
    grants = [s for s in policy(translated, with_secret) if s["Action"] == ["secretsmanager:GetSecretValue"]]
    assert [g["Resource"] for g in grants] == [{"Ref": "ProviderKeysSecretArn"}]


@pytest.mark.parametrize(
    ("value", "allowed"),
    [("", True), (SECRET, True), ("chatloop/provider-keys", False), ("arn:aws:s3:::bucket", False)],
)
def test_the_secret_parameter_takes_a_secret_arn_or_nothing(translated, value, allowed):
    pattern = translated["Parameters"]["ProviderKeysSecretArn"]["AllowedPattern"]
    assert bool(re.fullmatch(pattern, value)) is allowed


def test_the_model_chain_parameter_documents_bedrock_entries(translated):
    described = translated["Parameters"]["ModelChain"]["Description"]
    assert "bedrock:" in described and "BedrockModelIds" in described


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("blank", [None, ""], ids=["unset", "empty"])
def test_a_stack_without_a_secret_starts_and_answers(translated, fake_llm, monkeypatch, mode, blank):
    """The function configured from the environment the template gives a stack without a secret (each variable a
    parameter decides; the tables' names are known only once deployed) starts and answers through the handler,
    reading no secret: PROVIDER_KEYS_SECRET_ARN unset, or set empty by hand. The chain's one model needs no key
    (``local:``, a self-hosted endpoint: what the role-signed ``bedrock:`` provider is to the deployed stack)."""
    parameters = {"ResponseMode": mode, "ModelChain": "local:served-model"}
    variables = the_function(resolve(translated, parameters)["Resources"])["Environment"]["Variables"]
    values = parameter_values(translated, parameters)
    environ = {}
    for name, node in variables.items():
        try:
            environ[name] = evaluate(node, values)
        except (KeyError, ValueError):  # a resource's name or attribute
            continue
    assert "PROVIDER_KEYS_SECRET_ARN" not in environ and environ["MODEL_CHAIN"] == "local:served-model"
    if blank is not None:
        environ["PROVIDER_KEYS_SECRET_ARN"] = blank
    # a secret read would fail at once: a 503 keys_unavailable (a secret ARN here makes it so)
    monkeypatch.setenv("AWS_ENDPOINT_URL_SECRETS_MANAGER", "http://127.0.0.1:9")
    fake_llm.script("served-model", text("served-model", "Hello from the endpoint."))
    with serving(build_runtime(Settings.from_env(environ))):
        status, body, _ = invoke(rest_event("GET", "/health"))
        assert status == 200, body
        status, body, _ = invoke(
            rest_event("POST", "/chat", {"messages": [{"role": "user", "content": "hi"}], "stream": False})
        )
    assert status == 200, body
    answer = json.loads(body)
    assert (
        answer["message"]["content"] == "Hello from the endpoint." and answer["model"] == "local:served-model"
    )
