"""What CloudFormation would create from a template for given parameter values: its conditions evaluated,
conditional resources and outputs dropped, ``Fn::If`` branches chosen and ``AWS::NoValue`` removed.

The SAM translation keeps every condition (CloudFormation resolves them at deploy time), so a test that asks
"what does stream mode deploy?" resolves them first. Refs to parameters stay as they are, so the result is still
a template cfn-lint can check.

Also what the template tests share: the cfn-lint warnings SAM's own translation trips, and the function and the
API integrations of a template's resources.

Usage::

    deployed = resolve(translated, {"ResponseMode": "stream", "Architecture": "x86_64"})
    function = the_function(deployed["Resources"])
    evaluate({"Fn::Sub": "arn:${AWS::Partition}:x:${Name}"}, parameter_values(translated, {"Name": "y"}))
"""

from __future__ import annotations

import re
from typing import Any

# What SAM's own output trips (the Makefile's lint target ignores the same): W2001/W3005, SAM resolves the usage
# plan's parameters and adds DependsOn itself; W1028, SAM wraps a conditional function's integrations in an Fn::If
# on the condition its API already has.
TRANSLATION_WARNINGS = ("W2001", "W3005", "W1028")


def the_function(resources: dict) -> dict:
    """The template's one Lambda function's properties."""
    (function,) = [r["Properties"] for r in resources.values() if r["Type"] == "AWS::Lambda::Function"]
    return function


def integrations(resources: dict) -> list[dict]:
    """Every integration of the template's REST API (its OpenAPI body's x-amazon-apigateway-integration)."""
    (api,) = [r["Properties"] for r in resources.values() if r["Type"] == "AWS::ApiGateway::RestApi"]
    return [
        method["x-amazon-apigateway-integration"]
        for path in api["Body"]["paths"].values()
        for method in path.values()
    ]


_GONE = object()  # AWS::NoValue, or a branch of a false condition

PSEUDO = {
    "AWS::Partition": "aws",
    "AWS::Region": "us-east-1",
    "AWS::AccountId": "123456789012",
    "AWS::URLSuffix": "amazonaws.com",
    "AWS::StackName": "chatloop",
}
"""The pseudo parameters' values :func:`parameter_values` starts from (a test may pass others)."""


def parameter_values(template: dict[str, Any], parameters: dict[str, str]) -> dict[str, str]:
    """Every parameter's value as CloudFormation would take it (its default unless given), and the pseudo
    parameters (:data:`PSEUDO`, overridable through ``parameters``)."""
    values = {name: str(spec.get("Default", "")) for name, spec in template.get("Parameters", {}).items()}
    return {**PSEUDO, **values, **parameters}


def evaluate(node: Any, values: dict[str, str]) -> Any:
    """What CloudFormation makes of ``node`` given parameter ``values``: Ref (to a parameter), Fn::Sub,
    Fn::Join, Fn::Split and Fn::Select evaluated, lists and plain strings as they are. Anything else (a
    resource's Ref or attribute) raises: a test asks only about what parameters decide."""
    if isinstance(node, list):
        return [evaluate(item, values) for item in node]
    if isinstance(node, str | int):
        return str(node)
    (function, argument), *rest = node.items()
    if rest:
        raise ValueError(f"cannot evaluate {node!r}")
    if function == "Ref":
        return values[argument]
    if function == "Fn::Select":
        return evaluate(argument[1], values)[int(evaluate(argument[0], values))]
    if function == "Fn::Split":
        return evaluate(argument[1], values).split(argument[0])
    if function == "Fn::Join":
        return argument[0].join(evaluate(argument[1], values))
    if function == "Fn::Sub":
        text, names = (argument, {}) if isinstance(argument, str) else argument
        known = {**values, **{k: evaluate(v, values) for k, v in names.items()}}
        return re.sub(r"\$\{([^}!]+)\}", lambda m: known[m.group(1)], text)
    raise ValueError(f"cannot evaluate {function}")


def resolve(template: dict[str, Any], parameters: dict[str, str]) -> dict[str, Any]:
    values = parameter_values(template, parameters)
    definitions = template.get("Conditions", {})
    known: dict[str, bool] = {}

    def condition(name: str) -> bool:
        if name not in known:
            known[name] = test(definitions[name])
        return known[name]

    def scalar(node: Any) -> str:
        value = evaluate(node, values)
        if not isinstance(value, str):
            raise ValueError(f"{node!r} is not a string in a condition")
        return value

    def test(node: dict[str, Any]) -> bool:
        (function, argument), *_ = node.items()
        if function == "Condition":
            return condition(argument)
        if function == "Fn::Equals":
            return scalar(argument[0]) == scalar(argument[1])
        if function == "Fn::Not":
            return not test(argument[0])
        if function == "Fn::And":
            return all(test(a) for a in argument)
        if function == "Fn::Or":
            return any(test(a) for a in argument)
        raise ValueError(f"unknown condition function {function}")

    def walk(node: Any) -> Any:
        if isinstance(node, list):
            return [w for w in map(walk, node) if w is not _GONE]
        if not isinstance(node, dict):
            return node
        if node == {"Ref": "AWS::NoValue"}:
            return _GONE
        if set(node) == {"Fn::If"}:
            name, when_true, when_false = node["Fn::If"]
            return walk(when_true if condition(name) else when_false)
        return {k: w for k, w in ((k, walk(v)) for k, v in node.items()) if w is not _GONE}

    def kept(section: dict[str, Any]) -> dict[str, Any]:
        out = {}
        for name, item in section.items():
            if "Condition" in item and not condition(item["Condition"]):
                continue
            out[name] = walk({k: v for k, v in item.items() if k != "Condition"})
        return out

    resolved = {k: v for k, v in template.items() if k not in {"Conditions", "Resources", "Outputs"}}
    resolved["Resources"] = kept(template["Resources"])
    if "Outputs" in template:
        resolved["Outputs"] = kept(template["Outputs"])
    return resolved
