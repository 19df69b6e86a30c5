"""The template with SnapStart on and off, in both response modes: lint-clean as deployed, served through the
"live" alias everywhere (integrations, invoke permissions, Function URL), the Web Adapter's hooks in stream mode,
SnapStart's constraints kept, and 512 MB allowed."""

from __future__ import annotations

import json
import re

import pytest

from chatloop.api.app import route_paths, routes
from chatloop.config import Settings
from chatloop.snapstart import check_hook_paths
from tests.support.cfn import TRANSLATION_WARNINGS, integrations, resolve, the_function
from tests.support.cfn_lint import lint_each

CASES = [(mode, snap) for mode in ("stream", "buffered") for snap in ("true", "false")]


def deployed(translated: dict, mode: str, snapstart: str) -> dict:
    parameters = {"ResponseMode": mode, "EnableSnapStart": snapstart, "EnableFunctionUrl": "true"}
    return resolve(translated, parameters)


def of_type(resources: dict, kind: str) -> dict[str, dict]:
    return {name: r for name, r in resources.items() if r["Type"] == kind}


@pytest.fixture(scope="module")
def cases_linted(translated, tmp_path_factory) -> dict[tuple[str, str], list[str]]:
    """cfn-lint's findings for each case, from one cfn-lint run over the four."""
    templates = {(mode, snap): deployed(translated, mode, snap) for mode, snap in CASES}
    return lint_each(templates, tmp_path_factory.mktemp("snapstart"), TRANSLATION_WARNINGS)


@pytest.mark.slow  # a cfn-lint run over the four
@pytest.mark.parametrize(("mode", "snapstart"), CASES)
def test_each_mode_with_snapstart_on_and_off_passes_cfn_lint(cases_linted, mode, snapstart):
    assert cases_linted[(mode, snapstart)] == []


@pytest.mark.parametrize(("mode", "snapstart"), CASES)
def test_everything_invokes_the_live_alias_never_latest(translated, mode, snapstart):
    resources = deployed(translated, mode, snapstart)["Resources"]
    function = the_function(resources)
    (alias_name, alias), *_ = of_type(resources, "AWS::Lambda::Alias").items()
    assert alias["Properties"]["Name"] == "live"
    (function_id,) = of_type(resources, "AWS::Lambda::Function")
    assert alias["Properties"]["FunctionName"] == {"Ref": function_id}
    (version_id,) = of_type(resources, "AWS::Lambda::Version")
    assert alias["Properties"]["FunctionVersion"] == {"Fn::GetAtt": [version_id, "Version"]}
    uris = [json.dumps(i["uri"]) for i in integrations(resources)]
    assert uris and all(f"${{{alias_name}}}" in uri for uri in uris), uris
    permissions = of_type(resources, "AWS::Lambda::Permission").values()
    assert permissions and all(p["Properties"]["FunctionName"] == {"Ref": alias_name} for p in permissions)
    url = next(iter(of_type(resources, "AWS::Lambda::Url").values()))["Properties"]
    assert url["Qualifier"] == {"Fn::Select": [7, {"Fn::Split": [":", {"Ref": alias_name}]}]}
    if snapstart == "true":
        assert function["SnapStart"] == {"ApplyOn": "PublishedVersions"}
    else:
        assert "SnapStart" not in function


@pytest.mark.parametrize("snapstart", ["true", "false"])
def test_stream_mode_sets_the_adapters_snapstart_hooks_only_with_snapstart(translated, snapstart):
    resources = deployed(translated, "stream", snapstart)["Resources"]
    env = the_function(resources)["Environment"]["Variables"]
    hooks = {k: v for k, v in env.items() if k.startswith("AWS_LWA_SNAPSTART_")}
    if snapstart == "false":
        assert hooks == {}
        return
    settings = Settings.from_env(hooks)
    assert (
        len(check_hook_paths(settings, route_paths(routes(Settings())))) == 2
    )  # dedicated, distinct, valid for the app's routes
    assert all(not re.search(r"%", v) and v not in ("/", "/events") for v in hooks.values())
    layers = json.dumps(the_function(resources)["Layers"])
    assert "LambdaAdapterLayer" in layers and "${WebAdapterLayerVersion}" in layers
    assert translated["Parameters"]["WebAdapterLayerVersion"]["MinValue"] >= 30  # adapter v1.1.0: the hooks


def test_buffered_mode_has_no_adapter_hook_paths(translated):
    env = the_function(deployed(translated, "buffered", "true")["Resources"])["Environment"]["Variables"]
    assert not [k for k in env if k.startswith("AWS_LWA_")]


@pytest.mark.parametrize(("mode", "snapstart"), CASES)
def test_snapstarts_constraints_hold(translated, mode, snapstart):
    """At most 512 MB of ephemeral storage, no EFS, no provisioned concurrency on a SnapStart function."""
    function = the_function(deployed(translated, mode, snapstart)["Resources"])
    assert function["EphemeralStorage"]["Size"] <= 512
    assert "FileSystemConfigs" not in function
    resources = deployed(translated, mode, snapstart)["Resources"]
    assert not [
        a for a in of_type(resources, "AWS::Lambda::Alias").values() if "ProvisionedConcurrencyConfig" in a
    ]


def test_memory_size_allows_512_and_defaults_to_it(translated):
    memory = translated["Parameters"]["MemorySize"]
    assert memory["MinValue"] == 512 and memory["Default"] == 512
    settings = Settings.from_env({"AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "512"})
    assert settings.sandbox_concurrency() == 1  # one 256 MB sandbox in half of 512 MB
    assert translated["Parameters"]["EnableSnapStart"]["AllowedValues"] == ["true", "false"]
