"""The WebSocket API in template.yaml (``EnableWebSocketApi``), as SAM translates it and CloudFormation would
deploy it in each mode: the three routes to one dedicated buffered function, ``$connect`` behind the REST API's key,
the function allowed to post to this API's connections only, and nothing of it when it is off."""

from __future__ import annotations

import json

import pytest

from tests.support.cfn import PSEUDO, TRANSLATION_WARNINGS, resolve
from tests.support.cfn_lint import lint_each

MODES = ("stream", "buffered")


def deployed(translated: dict, mode: str, on: str = "true") -> dict:
    return resolve(translated, {"ResponseMode": mode, "EnableWebSocketApi": on})


def of_type(resources: dict, kind: str) -> dict[str, dict]:
    return {name: r["Properties"] for name, r in resources.items() if r["Type"] == kind}


@pytest.mark.parametrize("mode", MODES)
def test_off_by_default_nothing_of_it_is_deployed(translated, mode):
    resources = resolve(translated, {"ResponseMode": mode})["Resources"]
    assert not [n for n, r in resources.items() if "ApiGatewayV2" in r["Type"] or n.startswith("WebSocket")]
    assert resolve(translated, {"ResponseMode": mode})["Outputs"]["WebSocketUrl"]["Value"] == "disabled"


@pytest.mark.parametrize("mode", MODES)
def test_three_routes_reach_one_buffered_function_through_its_live_alias(translated, mode):
    resources = deployed(translated, mode)["Resources"]
    (api,) = of_type(resources, "AWS::ApiGatewayV2::Api").values()
    assert api["ProtocolType"] == "WEBSOCKET"
    assert api["ApiKeySelectionExpression"] == "$request.header.x-api-key"
    routes = {r["RouteKey"]: r for r in of_type(resources, "AWS::ApiGatewayV2::Route").values()}
    assert set(routes) == {"$connect", "$default", "$disconnect"}
    assert routes["$connect"]["ApiKeyRequired"] is True  # the REST API's caller check: its key, apikey:<id>
    assert {r["Target"]["Fn::Sub"] for r in routes.values()} == {"integrations/${WebSocketIntegration}"}
    (integration,) = of_type(resources, "AWS::ApiGatewayV2::Integration").values()
    assert integration["IntegrationType"] == "AWS_PROXY" and integration["TimeoutInMillis"] <= 29000
    assert integration["IntegrationUri"]["Fn::Sub"][1] == {"Alias": {"Ref": "WebSocketFunctionAliaslive"}}
    function = resources["WebSocketFunction"]["Properties"]
    assert function["Handler"] == "app.handler"  # not run.sh: the Web Adapter cannot answer a WebSocket API
    assert "AWS_LAMBDA_EXEC_WRAPPER" not in function["Environment"]["Variables"]
    assert "LambdaAdapterLayer" not in json.dumps(function.get("Layers", []))
    timeout = "StreamFunctionTimeoutSeconds" if mode == "stream" else "FunctionTimeoutSeconds"
    assert function["Timeout"] == {"Ref": timeout}  # a turn in the worker runs as long as the mode's turns do
    (permission,) = [
        p for p in of_type(resources, "AWS::Lambda::Permission").values() if "WebSocketApi" in json.dumps(p)
    ]
    assert permission["FunctionName"] == {"Ref": "WebSocketFunctionAliaslive"}
    assert permission["Principal"] == "apigateway.amazonaws.com"


@pytest.mark.parametrize("mode", MODES)
def test_the_key_the_rest_api_hands_out_opens_the_socket_with_the_same_limits(translated, mode):
    resources = deployed(translated, mode)["Resources"]
    (stage,) = of_type(resources, "AWS::ApiGatewayV2::Stage").values()
    assert stage["AutoDeploy"] is True and stage["StageName"] == "responses"
    plan = resources["WebSocketUsagePlan"]["Properties"]
    assert plan["ApiStages"] == [{"ApiId": {"Ref": "WebSocketApi"}, "Stage": "responses"}]
    assert plan["Quota"]["Limit"] == {"Ref": "DailyQuota"}
    assert plan["Throttle"]["RateLimit"] == {"Ref": "ThrottleRateLimit"}
    key = resources["WebSocketUsagePlanKey"]["Properties"]
    assert key["KeyId"] == {"Ref": "ChatApiApiKey" if mode == "stream" else "BufferedChatApiApiKey"}


def test_the_function_may_post_to_this_apis_connections_only_and_invoke_only_itself(translated):
    resources = deployed(translated, "stream")["Resources"]
    role = resources["WebSocketFunctionRole"]["Properties"]
    assert {"Ref": "WebSocketFunctionPolicy"} in role["ManagedPolicyArns"]
    statements = resources["WebSocketFunctionPolicy"]["Properties"]["PolicyDocument"]["Statement"]
    manage = [s for s in statements if "execute-api:ManageConnections" in s["Action"]]
    assert manage == [
        {
            "Effect": "Allow",
            "Action": ["execute-api:ManageConnections"],
            "Resource": {
                "Fn::Sub": "arn:${AWS::Partition}:execute-api:${AWS::Region}:${AWS::AccountId}:${WebSocketApi}"
                "/responses/POST/@connections/*"
            },
        }
    ]
    (invoke,) = [s for s in statements if "lambda:InvokeFunction" in s["Action"]]
    arns = [r["Fn::Sub"].replace("${AWS::StackName}", PSEUDO["AWS::StackName"]) for r in invoke["Resource"]]
    assert [a.rsplit(":function:", 1)[1] for a in arns] == ["chatloop-websocket", "chatloop-websocket:*"]
    assert (
        resources["WebSocketFunction"]["Properties"]["FunctionName"]["Fn::Sub"]
        == "${AWS::StackName}-websocket"
    )
    env = resources["WebSocketFunction"]["Properties"]["Environment"]["Variables"]
    assert env["WEBSOCKET_MANAGEMENT_ENDPOINT"]["Fn::Sub"].endswith("/responses")


def test_the_outputs_name_the_socket_and_the_sdks_base_url(translated):
    outputs = deployed(translated, "buffered")["Outputs"]
    assert outputs["WebSocketUrl"]["Value"]["Fn::Sub"].startswith("wss://${WebSocketApi}.execute-api.")
    assert outputs["WebSocketUrl"]["Value"]["Fn::Sub"].endswith("/responses")
    base = outputs["WebSocketBaseUrl"]["Value"]["Fn::Sub"]
    assert outputs["WebSocketUrl"]["Value"]["Fn::Sub"] == base + "/responses"  # what the SDKs open


@pytest.mark.slow  # one cfn-lint run over both modes
def test_each_mode_with_the_websocket_api_passes_cfn_lint(translated, tmp_path):
    found = lint_each({m: deployed(translated, m) for m in MODES}, tmp_path, ignore=TRANSLATION_WARNINGS)
    assert found == {m: [] for m in MODES}
