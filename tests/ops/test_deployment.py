"""Deployment and operations: the SAM template (linted, translated, secure), the Makefile's AWS targets against a
moto server on 127.0.0.1, and the build's size limits."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import boto3
import pytest
from cfnlint.decode import cfn_yaml
from moto.server import ThreadedMotoServer
from scripts.package import code_sha256, unzipped_size

from tests.support.adapter import READINESS_HEALTHY_STATUS
from tests.support.cfn import TRANSLATION_WARNINGS, integrations, resolve, the_function
from tests.support.cfn_lint import lint_each
from tests.support.repo import BIN, ROOT, run


def pyc_flags(data: bytes) -> int:
    """The .pyc header's flags word (PEP 552): 1 = hash-based and not checked against the source."""
    return int.from_bytes(data[4:8], "little")


# --- the template ----------------------------------------------------------------------------------
MODES = [("stream", "arm64"), ("stream", "x86_64"), ("buffered", "arm64"), ("buffered", "x86_64")]


@pytest.fixture(scope="module")
def template() -> dict:
    return cfn_yaml.load(str(ROOT / "template.yaml"))


@pytest.mark.slow  # two cfn-lint runs
def test_template_and_its_translation_pass_cfn_lint(translated, tmp_path):
    assert run(str(BIN / "cfn-lint"), "template.yaml", check=False).returncode == 0
    path = tmp_path / "t.json"
    path.write_text(json.dumps(translated))
    result = run(
        str(BIN / "cfn-lint"), "--ignore-checks", *TRANSLATION_WARNINGS, "--", str(path), check=False
    )
    assert result.returncode == 0, result.stdout


@pytest.mark.slow  # the SAM translation and a cfn-lint run
def test_translate_then_lint_catches_what_cfn_lint_alone_misses(tmp_path):
    broken = (ROOT / "template.yaml").read_text().replace("Runtime: python3.12", "Runtime: python3.99")
    (tmp_path / "template.yaml").write_text(broken)
    run(
        sys.executable,
        str(ROOT / "scripts/translate_template.py"),
        str(tmp_path / "template.yaml"),
        str(tmp_path / "t.json"),
    )
    result = run(
        str(BIN / "cfn-lint"),
        "--ignore-checks",
        *TRANSLATION_WARNINGS,
        "--",
        str(tmp_path / "t.json"),
        check=False,
    )
    assert result.returncode != 0 and "python3.99" in result.stdout


SECRET_ARN = "arn:aws:secretsmanager:us-east-1:123456789012:secret:chatloop-keys-AbCdEf"


def deployed(translated: dict, mode: str, arch: str = "arm64") -> dict:
    """The stack as deployed with a provider keys secret (a stack without one: tests/ops/test_template_bedrock.py)."""
    return resolve(
        translated, {"ResponseMode": mode, "Architecture": arch, "ProviderKeysSecretArn": SECRET_ARN}
    )


def test_function_shape(translated):
    params = translated["Parameters"]
    assert params["ResponseMode"]["Default"] == "stream"
    assert (
        params["Architecture"]["Default"] == "arm64" and "x86_64" in params["Architecture"]["AllowedValues"]
    )
    assert params["MemorySize"]["MinValue"] >= 512 and params["MemorySize"]["Default"] >= 512  # #27: measured
    assert params["FunctionTimeoutSeconds"]["Default"] > params["RequestTimeoutSeconds"]["Default"]
    assert (
        params["StreamFunctionTimeoutSeconds"]["Default"] > params["StreamRequestTimeoutSeconds"]["Default"]
    )
    for mode, arch in MODES:
        resources = deployed(translated, mode, arch)["Resources"]
        fn = the_function(resources)
        assert fn["Runtime"] == "python3.12" and fn["Architectures"] == [{"Ref": "Architecture"}]
        assert fn["FunctionName"] == {
            "Fn::Sub": "${AWS::StackName}-chat" + ("" if mode == "stream" else "-buffered")
        }
        assert fn["Layers"][0]["Ref"].startswith("DependenciesLayer")  # SAM suffixes a layer version's id
        assert fn["LoggingConfig"]["LogFormat"] == "JSON" and fn["LoggingConfig"]["LogGroup"] == {
            "Ref": "ChatLogGroup"
        }
        env = fn["Environment"]["Variables"]
        assert (
            fn["LoggingConfig"]["ApplicationLogLevel"] == env["POWERTOOLS_LOG_LEVEL"] == {"Ref": "LogLevel"}
        )
        assert {
            "MODEL_CHAIN",
            "MAX_ITERATIONS",
            "PROVIDER_KEYS_SECRET_ARN",
            "REQUEST_TIMEOUT_SECONDS",
        } <= set(env)
        outputs = deployed(translated, mode, arch)["Outputs"]
        assert {"ApiUrl", "ApiKeyId", "FunctionName", "LogGroupName", "ResponseMode"} <= set(outputs)


@pytest.mark.parametrize("arch", ["arm64", "x86_64"])
def test_stream_mode_serves_run_sh_under_the_web_adapter_and_streams_every_route(translated, arch):
    """Stream mode as the Lambda Web Adapter documents it for a zip function (awslabs/aws-lambda-web-adapter,
    docs/guide getting-started/zip-packages: the exec wrapper, run.sh as the handler, the public layer per
    architecture) and API Gateway's streamed Lambda proxy integration (the API Gateway developer guide,
    "Set up a Lambda proxy integration with payload response streaming": the 2021-11-15 response-streaming-
    invocations URI and responseTransferMode STREAM)."""
    template = deployed(translated, "stream", arch)
    resources = template["Resources"]
    fn = the_function(resources)
    env = fn["Environment"]["Variables"]
    assert fn["Handler"] == "run.sh"
    assert (
        env["AWS_LAMBDA_EXEC_WRAPPER"] == "/opt/bootstrap" and env["AWS_LWA_INVOKE_MODE"] == "response_stream"
    )
    assert env["AWS_LWA_READINESS_CHECK_PATH"] == "/health" and env["AWS_LWA_PORT"].isdigit()
    # the stream-mode tests' adapter (tests/support/adapter.py) waits for the same statuses
    assert env["AWS_LWA_READINESS_CHECK_HEALTHY_STATUS"] == READINESS_HEALTHY_STATUS
    layer = "LambdaAdapterLayerArm64" if arch == "arm64" else "LambdaAdapterLayerX86"
    adapter = json.dumps(fn["Layers"][1:])
    assert f"753240598075:layer:{layer}:${{WebAdapterLayerVersion}}" in adapter and len(fn["Layers"]) == 2
    assert fn["Timeout"] == {"Ref": "StreamFunctionTimeoutSeconds"}
    assert env["REQUEST_TIMEOUT_SECONDS"] == {"Ref": "StreamRequestTimeoutSeconds"}
    assert (
        translated["Parameters"]["StreamRequestTimeoutSeconds"]["Default"],
        translated["Parameters"]["StreamFunctionTimeoutSeconds"]["Default"],
    ) == (110, 120)
    routes = integrations(resources)
    assert len(routes) == 3
    for integration in routes:  # /health too: the adapter answers every invocation in the streaming format
        assert integration["responseTransferMode"] == "STREAM"
        # the "live" alias, never $LATEST (#27)
        assert "/2021-11-15/functions/${ChatFunctionAliaslive}/response-streaming-invocations" in json.dumps(
            integration["uri"]
        )
    url = {"Fn::Sub": "https://${ChatApi}.execute-api.${AWS::Region}.${AWS::URLSuffix}/${StageName}"}
    assert template["Outputs"]["ApiUrl"]["Value"] == url


def test_buffered_mode_is_the_mangum_handler_inside_api_gateways_29_seconds(translated):
    for arch in ("arm64", "x86_64"):
        resources = deployed(translated, "buffered", arch)["Resources"]
        fn = the_function(resources)
        env = fn["Environment"]["Variables"]
        assert fn["Handler"] == "app.handler" and len(fn["Layers"]) == 1
        assert not [name for name in env if name.startswith(("AWS_LWA_", "AWS_LAMBDA_EXEC_WRAPPER"))]
        assert fn["Timeout"] == {"Ref": "FunctionTimeoutSeconds"}
        assert env["REQUEST_TIMEOUT_SECONDS"] == {"Ref": "RequestTimeoutSeconds"}
        assert translated["Parameters"]["RequestTimeoutSeconds"]["MaxValue"] < 29
        for integration in integrations(resources):
            assert "responseTransferMode" not in integration
            assert "/2015-03-31/functions/${BufferedChatFunctionAliaslive}/invocations" in json.dumps(
                integration["uri"]
            )


@pytest.mark.parametrize("mode", ["stream", "buffered"])
def test_the_function_url_matches_the_mode(translated, mode):
    template = resolve(translated, {"ResponseMode": mode, "EnableFunctionUrl": "true"})
    url = template["Resources"]["ChatFunctionUrl"]["Properties"]
    assert url["AuthType"] == "AWS_IAM"
    assert url["InvokeMode"] == ("RESPONSE_STREAM" if mode == "stream" else "BUFFERED")
    target = "ChatFunction" if mode == "stream" else "BufferedChatFunction"
    assert url["TargetFunctionArn"] == {"Fn::GetAtt": [target, "Arn"]}
    assert "ChatFunctionUrl" not in resolve(translated, {"ResponseMode": mode})["Resources"]


@pytest.fixture(scope="module")
def modes_linted(translated, tmp_path_factory) -> dict[tuple[str, str], list[str]]:
    """cfn-lint's findings for each mode as deployed, from one cfn-lint run over the four."""
    templates = {
        (mode, arch): resolve(
            translated, {"ResponseMode": mode, "Architecture": arch, "EnableFunctionUrl": "true"}
        )
        for mode, arch in MODES
    }
    return lint_each(templates, tmp_path_factory.mktemp("modes"), TRANSLATION_WARNINGS)


@pytest.mark.slow  # a cfn-lint run over the four
@pytest.mark.parametrize(("mode", "arch"), MODES)
def test_each_mode_as_deployed_passes_cfn_lint(modes_linted, mode, arch):
    assert modes_linted[(mode, arch)] == []


def test_the_resolver_drops_what_a_false_condition_guards(translated):
    """The helper the mode tests stand on: without it, both modes' functions would be "deployed" at once."""
    kinds = [r["Type"] for r in translated["Resources"].values()]
    # each mode's, and the WebSocket API's (EnableWebSocketApi)
    assert kinds.count("AWS::Lambda::Function") == 3
    for mode in ("stream", "buffered"):
        kinds = [r["Type"] for r in deployed(translated, mode)["Resources"].values()]
        assert kinds.count("AWS::Lambda::Function") == kinds.count("AWS::ApiGateway::RestApi") == 1
        assert kinds.count("AWS::ApiGateway::ApiKey") == kinds.count("AWS::ApiGateway::UsagePlan") == 1


@pytest.mark.parametrize("mode", ["stream", "buffered"])
def test_the_api_is_never_an_open_proxy(translated, mode):
    resources = deployed(translated, mode)["Resources"]
    api = next(r for r in resources.values() if r["Type"] == "AWS::ApiGateway::RestApi")
    open_routes = {
        (path, method)
        for path, methods in api["Properties"]["Body"]["paths"].items()
        for method, spec in methods.items()
        if {"api_key": []} not in spec.get("security", [])
    }
    # Only the page and its assets (files of the package, no model behind them) are served without the key.
    assert open_routes == {("/", "get"), ("/static/{proxy+}", "get")}
    plan = next(r for r in resources.values() if r["Type"] == "AWS::ApiGateway::UsagePlan")["Properties"]
    assert (
        plan["Throttle"]["RateLimit"] > 0 and plan["Quota"]["Period"] == "DAY" and plan["Quota"]["Limit"] > 0
    )
    url = next(r for r in translated["Resources"].values() if r["Type"] == "AWS::Lambda::Url")
    assert url["Properties"]["AuthType"] == "AWS_IAM" and url["Condition"] == "CreateFunctionUrl"


FUNCTION_ARN = (
    "arn:${AWS::Partition}:lambda:${AWS::Region}:${AWS::AccountId}:function:${AWS::StackName}-${Name}"
)


@pytest.mark.parametrize("mode", ["stream", "buffered"])
def test_log_retention_and_least_privilege(translated, mode):
    resources = deployed(translated, mode)["Resources"]
    group = resources["ChatLogGroup"]["Properties"]
    assert group["RetentionInDays"] == {"Ref": "LogRetentionDays"}
    (role,) = [r["Properties"] for r in resources.values() if r["Type"] == "AWS::IAM::Role"]
    assert not role.get("Policies")  # nothing inline: what the function may do is the one managed policy
    assert role["ManagedPolicyArns"] == [
        "arn:aws:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole",
        {"Ref": "ChatFunctionPolicy"},
    ]
    statements = resources["ChatFunctionPolicy"]["Properties"]["PolicyDocument"]["Statement"]
    grants = {tuple(s["Action"]): s["Resource"] for s in statements}
    assert grants == {
        ("secretsmanager:GetSecretValue",): {"Ref": "ProviderKeysSecretArn"},
        ("dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem"): {
            "Fn::GetAtt": ["IdempotencyTable", "Arn"]
        },
        (
            "dynamodb:GetItem",
            "dynamodb:PutItem",
            "dynamodb:UpdateItem",
            "dynamodb:DeleteItem",
            "dynamodb:Query",
        ): {"Fn::GetAtt": ["ConversationTable", "Arn"]},
        # a background response's turn: an asynchronous invocation of this mode's function itself, nothing else
        ("lambda:InvokeFunction",): [
            {
                "Fn::Sub": [
                    f"{FUNCTION_ARN}{suffix}",
                    {"Name": "chat" if mode == "stream" else "chat-buffered"},
                ]
            }
            for suffix in ("", ":*")
        ],
    }


def test_the_idempotency_table_is_powertools_layout_with_ttl(translated):
    resources = deployed(translated, "stream")["Resources"]
    table = resources["IdempotencyTable"]["Properties"]
    assert table["BillingMode"] == "PAY_PER_REQUEST"
    assert table["KeySchema"] == [
        {"AttributeName": "id", "KeyType": "HASH"}
    ]  # DynamoDBPersistenceLayer's key_attr
    assert table["TimeToLiveSpecification"] == {
        "AttributeName": "expiration",
        "Enabled": True,
    }  # its expiry_attr
    for mode in ("stream", "buffered"):
        env = the_function(deployed(translated, mode)["Resources"])["Environment"]["Variables"]
        assert env["IDEMPOTENCY_TABLE_NAME"] == {"Ref": "IdempotencyTable"}
        assert env["IDEMPOTENCY_EXPIRY_SECONDS"] == {"Ref": "IdempotencyExpirySeconds"}


def test_the_conversation_table_is_the_stores_and_the_policy_grants_what_it_calls(translated):
    """The table as store/dynamodb.py creates it in tests, with TTL on the attribute it writes, in both modes; the
    policy grants exactly the IAM actions of the calls the store makes (a transaction's Put / Delete need PutItem /
    DeleteItem), so a new call without its grant, or a grant nothing uses, fails here."""
    from chatloop.store import dynamodb, dynamodb_batch

    resources = deployed(translated, "stream")["Resources"]
    table = resources["ConversationTable"]["Properties"]
    assert {k: table[k] for k in dynamodb.TABLE_DEFINITION} == dynamodb.TABLE_DEFINITION
    assert table["TimeToLiveSpecification"] == {"AttributeName": dynamodb.TTL_ATTRIBUTE, "Enabled": True}
    assert "GlobalSecondaryIndexes" not in table  # every read is strongly consistent: the table only
    for mode in ("stream", "buffered"):
        env = the_function(deployed(translated, mode)["Resources"])["Environment"]["Variables"]
        assert env["CONVERSATION_TABLE_NAME"] == {"Ref": "ConversationTable"}
    source = "".join(
        Path(m.__file__).read_text() for m in (dynamodb, dynamodb_batch)
    )  # every call the store makes
    calls = set(re.findall(r"client\.([a-z_]+)", source)) - {"create_table", "update_time_to_live"}
    as_actions = {"transact_write_items": {"PutItem", "DeleteItem"}}
    used = set().union(*(as_actions.get(c, {"".join(w.title() for w in c.split("_"))}) for c in calls))
    statements = resources["ChatFunctionPolicy"]["Properties"]["PolicyDocument"]["Statement"]
    (grant,) = [s for s in statements if s["Resource"] == {"Fn::GetAtt": ["ConversationTable", "Arn"]}]
    assert {a.removeprefix("dynamodb:") for a in grant["Action"]} == used


@pytest.mark.parametrize("mode", ["stream", "buffered"])
def test_operators_configure_mcp_servers_through_the_template(translated, mode):
    """MCP_SERVERS and MCP_ALLOWED_URLS reach the function from parameters, empty (no MCP) by default; a server's
    token is a ${NAME} placeholder filled from the provider-keys secret, never a template value."""
    env = the_function(deployed(translated, mode)["Resources"])["Environment"]["Variables"]
    assert env["MCP_SERVERS"] == {"Ref": "McpServers"}
    assert env["MCP_ALLOWED_URLS"] == {"Ref": "McpAllowedUrls"}
    assert translated["Parameters"]["McpServers"]["Default"] == ""
    assert translated["Parameters"]["McpAllowedUrls"]["Default"] == ""


def test_the_sandbox_budget_follows_the_functions_memory(translated):
    """Ephemeral storage is stated (the sandbox writes nothing there), and the sandbox's concurrency derives from MemorySize,
    which Lambda passes as AWS_LAMBDA_FUNCTION_MEMORY_SIZE: no second place to keep in step."""
    from chatloop.config import Settings

    function = the_function(deployed(translated, "stream")["Resources"])
    assert function["EphemeralStorage"] == {"Size": 512}
    assert function["MemorySize"] == {"Ref": "MemorySize"}
    assert not {"JS_MAX_CONCURRENCY", "JS_MEMORY_MB"} & set(function["Environment"]["Variables"])
    minimum = translated["Parameters"]["MemorySize"]["MinValue"]
    settings = Settings.from_env({"AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(minimum)})
    assert settings.sandbox_concurrency() * settings.js_memory_mb <= minimum * settings.sandbox_memory_share


def test_no_secret_value_in_template_or_samconfig(translated):
    for name in ("template.yaml", "samconfig.toml"):
        text = (ROOT / name).read_text()
        assert not re.search(r"gsk_[A-Za-z0-9]{8,}|sk-[A-Za-z0-9]{8,}|AKIA[0-9A-Z]{16}", text), name
    template = cfn_yaml.load(str(ROOT / "template.yaml"))
    # keys never pass through the template: no parameter takes one, only the secret's ARN
    assert not [p for p in template["Parameters"] if re.search(r"api_?key|token|password", p, re.IGNORECASE)]
    for mode in ("stream", "buffered"):
        env = the_function(deployed(translated, mode)["Resources"])["Environment"]["Variables"]
        assert not {"GROQ_API_KEY", "OPENAI_API_KEY"} & set(env)


def test_every_environment_variable_is_documented():
    from chatloop.config import Settings

    table = (ROOT / "docs" / "configuration.md").read_text()  # the configuration table
    from chatloop.config import env_name
    from chatloop.providers.catalog import Catalog

    names = [env_name(f) for f in Settings.__dataclass_fields__]
    for provider in Catalog.load().providers.values():  # each provider's key and base-URL variables
        names += [v for v in (provider.key_env, provider.base_url_env) if v]
    names += [
        "GROQ_API_KEY",
        "OPENAI_API_KEY",
        "GROQ_BASE_URL",
        "OPENAI_BASE_URL",
        "POWERTOOLS_SERVICE_NAME",
        "POWERTOOLS_METRICS_NAMESPACE",
        "POWERTOOLS_LOG_LEVEL",
        "DENO_BIN",
        "PORT",
    ]
    missing = [n for n in names if f"`{n}`" not in table]
    assert not missing


# --- make targets against moto ---------------------------------------------------------------------
@pytest.fixture(scope="module")
def moto():
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    env = {
        **os.environ,
        "AWS_ENDPOINT_URL": f"http://{host}:{port}",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_REGION": "us-east-1",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    env.pop("AWS_PROFILE", None)
    yield env
    server.stop()


def client(env: dict, service: str):
    return boto3.client(
        service,
        endpoint_url=env["AWS_ENDPOINT_URL"],
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )


@pytest.mark.slow  # make: the function's zip and five AWS CLI calls against a moto server
@pytest.mark.parametrize(
    ("mode", "function"), [("stream", "chatloop-ops-chat"), ("buffered", "chatloop-ops-chat-buffered")]
)
def test_deploy_lambda_fast_updates_the_code_and_prints_its_sha(moto, tmp_path, mode, function):
    """Each mode has its own function (template.yaml); MODE picks which one the fast deploy updates."""
    iam, lam = client(moto, "iam"), client(moto, "lambda")
    role = iam.create_role(
        RoleName=f"chatloop-test-role-{mode}",
        AssumeRolePolicyDocument=json.dumps(
            {
                "Version": "2012-10-17",
                "Statement": [
                    {
                        "Effect": "Allow",
                        "Principal": {"Service": "lambda.amazonaws.com"},
                        "Action": "sts:AssumeRole",
                    }
                ],
            }
        ),
    )["Role"]["Arn"]
    seed = tmp_path / "seed.zip"
    with zipfile.ZipFile(seed, "w") as z:
        z.writestr("app.py", "def handler(event, context):\n    return {}\n")
    lam.create_function(
        FunctionName=function,
        Runtime="python3.12",
        Role=role,
        Handler="run.sh" if mode == "stream" else "app.handler",
        Code={"ZipFile": seed.read_bytes()},
        Architectures=["arm64"],
        Publish=True,
    )
    lam.create_alias(
        FunctionName=function, Name="live", FunctionVersion="1"
    )  # as the template's AutoPublishAlias
    result = run(
        "make", "--no-print-directory", "deploy-lambda-fast", "STACK=chatloop-ops", f"MODE={mode}", env=moto
    )
    printed = re.search(r"CodeSha256 (\S+),", result.stdout).group(1)
    assert printed == code_sha256(ROOT / "build" / "function.zip")
    assert f"updated {function}:" in result.stdout
    assert lam.get_function(FunctionName=function)["Configuration"]["CodeSha256"] == printed
    # the new code is published and the alias every route invokes points at it (#27): otherwise it never runs
    live = lam.get_alias(FunctionName=function, Name="live")["FunctionVersion"]
    assert live != "1" and f"version {live} is now live" in result.stdout
    assert lam.get_function(FunctionName=function, Qualifier="live")["Configuration"]["CodeSha256"] == printed
    with zipfile.ZipFile(ROOT / "build" / "function.zip") as z:
        names = z.namelist()
    assert {
        "app.py",
        "run.sh",
        "chatloop/tools/javascript/runner.js",
        "chatloop/api/page/static/index.html",
    } <= set(names)
    assert not any(n.startswith(("tests/", "src/")) for n in names)
    if sys.version_info[:2] == (3, 12):  # bytecode is shipped when built by the runtime's Python
        with zipfile.ZipFile(ROOT / "build" / "function.zip") as z:
            assert pyc_flags(z.read("__pycache__/app.cpython-312.pyc")) == 1  # unchecked hash


DECISION = (
    "Tool execution decision: iteration={i} hasToolCalls=true validToolCalls=1 finishReason=tool_calls "
    "contentLength=0 hasSubstantiveAnswer=false hasSuccessfulJsExecution={js} duplicateCalls=0 "
    "budgetExhausted=false loopDetected=false tooManyIterations=false deadlineNear=false "
    "shouldExecuteTools={run} reason={reason}"
)


@pytest.mark.slow  # make, the AWS CLI and a moto server
def test_make_logs_prints_one_event_per_line_and_greps_work(moto):
    logs = client(moto, "logs")
    group = "/aws/lambda/chatloop-logs-chat"
    logs.create_log_group(logGroupName=group)
    logs.create_log_stream(logGroupName=group, logStreamName="2026/11/21/[$LATEST]abc")
    now = int(time.time() * 1000)
    records = [
        {
            "level": "INFO",
            "message": DECISION.format(i=1, js="false", run="true", reason="execute"),
            "correlation_id": "req-1",
        },
        {
            "level": "INFO",
            "message": DECISION.format(i=2, js="true", run="false", reason="js_already_succeeded"),
            "correlation_id": "req-1",
        },
        {
            "level": "INFO",
            "message": 'converged at 2 iterations tool_counts={"execute_javascript":1}',
            "correlation_id": "req-1",
        },
        {
            "level": "WARNING",
            "message": "model fallback: from=groq:a to=groq:b reason=rate_limited retry_after=5.0",
            "correlation_id": "req-2",
        },
    ]
    events = [{"timestamp": now + i, "message": json.dumps(r)} for i, r in enumerate(records)]
    events.append({"timestamp": now + 10, "message": "END RequestId: req-1\n"})
    logs.put_log_events(logGroupName=group, logStreamName="2026/11/21/[$LATEST]abc", logEvents=events)

    out = run("make", "--no-print-directory", "logs", "STACK=chatloop-logs", env=moto).stdout.splitlines()
    assert len(out) == 5 and all(line.count("\n") == 0 for line in out)
    assert out[1].endswith(DECISION.format(i=2, js="true", run="false", reason="js_already_succeeded"))
    assert " INFO req-1 Tool execution decision: iteration=1 " in out[0]

    grep = run(
        "bash",
        "-c",
        'make --no-print-directory logs STACK=chatloop-logs | grep "hasSuccessfulJsExecution=true"',
        env=moto,
    ).stdout.splitlines()
    assert len(grep) == 1 and "iteration=2" in grep[0]
    decisions = run(
        "make", "--no-print-directory", "logs-decisions", "STACK=chatloop-logs", env=moto
    ).stdout.splitlines()
    assert len(decisions) == 2 and all("Tool execution decision:" in line for line in decisions)
    filtered = run(
        "make", "--no-print-directory", "logs", "STACK=chatloop-logs", "FILTER=fallback", env=moto
    ).stdout
    assert filtered.count("\n") == 1 and "reason=rate_limited" in filtered


# --- the build -------------------------------------------------------------------------------------
@pytest.mark.slow(seconds=60)  # pip and the bytecode of an arm64 layer: handed out early in a parallel run
def test_make_build_fits_lambdas_limits():
    result = run("make", "--no-print-directory", "build", "ARCH=arm64")
    layer, function = ROOT / "build" / "layer.zip", ROOT / "build" / "function.zip"
    total = unzipped_size(layer) + unzipped_size(function)
    assert total < 250 * 1024 * 1024, result.stdout
    with zipfile.ZipFile(layer) as z:
        deno = z.getinfo("python/bin/deno")
        assert (deno.external_attr >> 16) & 0o111  # still executable
        assert z.read("python/bin/chatloop-arch").decode().strip() == "arm64"
        with z.open("python/bin/deno") as f:
            header = f.read(20)
        assert header[:4] == b"\x7fELF" and int.from_bytes(header[18:20], "little") == 0xB7  # EM_AARCH64
        assert not any(n.startswith("python/fastapi/") for n in z.namelist())
        if sys.version_info[:2] == (3, 12):
            assert pyc_flags(z.read("python/starlette/__pycache__/applications.cpython-312.pyc")) == 1


@pytest.mark.slow
def test_the_layer_finds_its_own_deno_as_on_lambda():
    """Lambda puts the layer's packages on sys.path from /opt/python; deno.find_deno_bin() must then find the
    layer's binary (python/bin/deno). Built for this machine's architecture so the binary can run here, by
    ``scripts/package.py`` as bench/artefacts.py builds it once for every test and bench run that needs it
    (unpacked read-only, as Lambda mounts /opt)."""
    saved = dict(os.environ)  # importing the bench package sets its own Powertools variables
    try:
        from bench import artefacts

        layer = artefacts.layer(ROOT / "requirements.txt") / "python"
    finally:
        os.environ.clear()
        os.environ.update(saved)
    base_python = Path(sys.base_prefix) / "bin" / f"python{sys.version_info.major}.{sys.version_info.minor}"
    assert not (Path(sys.base_prefix) / "bin" / "deno").exists()  # only the layer has one
    code = (
        "import sys; sys.path[:0] = [sys.argv[1], sys.argv[2]]; import deno; "
        "from chatloop.tools.javascript import JavaScriptSandbox; "
        "box = JavaScriptSandbox(prespawn=False); print(deno.find_deno_bin()); print(box.run('6 * 7', 5).payload)"
    )
    out = subprocess.run(
        [str(base_python), "-I", "-c", code, str(layer), str(ROOT / "src")],
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": "/usr/bin:/bin"},
        timeout=120,
    )
    lines = out.stdout.strip().splitlines()
    assert lines[-2] == str(layer / "bin" / "deno") and lines[-1] == "{'result': 42, 'output': ''}"
