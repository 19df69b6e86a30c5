"""Translate template.yaml (SAM) into plain CloudFormation, offline, so cfn-lint can check what SAM generates.

cfn-lint on a SAM template checks SAM's own schema only and misses errors inside generated resources (bad runtimes,
invoke modes, log levels); linting the translation catches them (shared/reference/lambda-conventions.md §5).

Usage::

    python scripts/translate_template.py template.yaml build/template.cfn.json && cfn-lint build/template.cfn.json
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from samtranslator.translator.transform import transform
from samtranslator.yaml_helper import yaml_parse


class NoManagedPolicies:
    """The translator asks IAM for managed policy ARNs; this template uses none, so nothing is looked up."""

    def load(self) -> dict[str, str]:
        return {}


def placeholders(template: dict) -> dict:
    """Local CodeUri / ContentUri paths become S3 placeholders, as `package` would make them (Globals included)."""
    sections = [r.get("Properties", {}) for r in template.get("Resources", {}).values()]
    sections += template.get("Globals", {}).values()
    for props in sections:
        for key in ("CodeUri", "ContentUri"):
            if isinstance(props.get(key), str) and not props[key].startswith("s3://"):
                props[key] = f"s3://placeholder-bucket/{props[key].strip('/')}.zip"
    return template


def main(source: str, target: str) -> int:
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    template = placeholders(yaml_parse(Path(source).read_text()))
    parameters = {
        "ProviderKeysSecretArn": "arn:aws:secretsmanager:us-east-1:123456789012:secret:chatloop-keys-AbCdEf"
    }
    translated = transform(template, parameters, NoManagedPolicies())
    Path(target).parent.mkdir(parents=True, exist_ok=True)
    Path(target).write_text(json.dumps(translated, indent=2) + "\n")
    print(f"{source} -> {target}: {len(translated['Resources'])} CloudFormation resources")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
