"""The parameter overrides ``make deploy`` passes, and a summary of what the stack will use (``make deploy`` prints it).

A chain of only ``bedrock:`` models needs no provider key, so no secret: ``SECRET_ARN`` is optional. What is not
given is not passed, so an existing stack keeps its value (``aws cloudformation deploy`` re-uses it) and a new one
takes the template's default; ``SECRET_ARN=none`` removes a stack's secret. When the chain is given and
``BEDROCK_MODELS`` is not, the role is granted the chain's ``bedrock:`` models (``BedrockModelIds``); a ``bedrock:``
entry the role would not be granted, or an id the template refuses, stops the deploy here with the reason, before
anything is uploaded.

Usage (the overrides on stdout, the summary on stderr)::

    python scripts/deploy_params.py --mode stream --arch arm64 --secret-arn "" \\
        --model-chain bedrock:amazon.nova-lite-v1:0 --bedrock-models "" -- MaxIterations=6
    # ResponseMode=stream Architecture=arm64 ModelChain=bedrock:amazon.nova-lite-v1:0 BedrockModelIds=amazon.nova-lite-v1:0
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CATALOG = ROOT / "src" / "chatloop" / "providers" / "models.json"
TEMPLATE = ROOT / "template.yaml"
ROLE_SIGNED = "bedrock"  # the provider whose calls the function's role signs: no key
REMOVE = "none"  # SECRET_ARN=none: the stack is to have no secret


class Refused(ValueError):
    """What would deploy a stack that cannot answer as asked: the deploy stops with this message."""


def keyed_providers() -> set[str]:
    """The catalog's providers that need a key from the environment or the provider keys secret (never Bedrock's,
    whatever its catalog entry says of an optional API key: on Lambda the role signs)."""
    providers = json.loads(CATALOG.read_text())["providers"]
    return {n for n, p in providers.items() if p.get("key_env") and p.get("key_required", True)} - {
        ROLE_SIGNED
    }


def allowed_pattern(parameter: str) -> str:
    """A template parameter's AllowedPattern, as CloudFormation will check it."""
    from samtranslator.yaml_helper import yaml_parse  # reads the template's !Ref / !If tags

    pattern: str = yaml_parse(TEMPLATE.read_text())["Parameters"][parameter]["AllowedPattern"]
    return pattern


def overrides(
    mode: str, arch: str, secret_arn: str, chain: str, bedrock_models: str, params: list[str]
) -> tuple[list[str], list[str]]:
    """The overrides to pass (before ``params``, which are passed as given) and the summary lines."""
    given = dict(p.split("=", 1) for p in params if "=" in p)
    chain = chain or given.get("ModelChain", "")
    bedrock = bedrock_models or given.get("BedrockModelIds", "")
    secret = "" if secret_arn == REMOVE else secret_arn or given.get("ProviderKeysSecretArn", "")
    entries = [e.strip() for e in chain.split(",") if e.strip()]
    in_chain = [e.split(":", 1)[1] for e in entries if e.split(":", 1)[0] == ROLE_SIGNED]
    derived = bool(in_chain) and not bedrock and "BedrockModelIds" not in given
    if derived:
        bedrock = ",".join(dict.fromkeys(in_chain))
    granted = [m for m in bedrock.split(",") if m]
    if bedrock and not re.fullmatch(allowed_pattern("BedrockModelIds"), bedrock):
        raise Refused(
            f"BEDROCK_MODELS={bedrock!r}: the template takes up to eight ids, comma-separated, no spaces"
        )
    if chain and (missing := [m for m in in_chain if m not in granted]):
        raise Refused(
            f"the chain names bedrock:{missing[0]} but the role would not be granted it: add it to BEDROCK_MODELS"
        )
    words = [f"ResponseMode={mode}", f"Architecture={arch}"]
    if chain and "ModelChain" not in given:
        words.append(f"ModelChain={chain}")
    if derived or (bedrock_models and "BedrockModelIds" not in given):
        words.append(f"BedrockModelIds={bedrock}")
    if secret_arn and "ProviderKeysSecretArn" not in given:
        words.append(f"ProviderKeysSecretArn={secret}")
    return words, summary(entries, granted, derived, secret, secret_arn)


def summary(entries: list[str], granted: list[str], derived: bool, secret: str, secret_arn: str) -> list[str]:
    keyed = sorted({e.split(":", 1)[0] for e in entries} & keyed_providers())
    lines = [
        f"model chain: {','.join(entries)}"
        if entries
        else "model chain: not given (the stack's, or the template's default)"
    ]
    if granted:
        lines.append(
            f"Bedrock models the role may invoke: {', '.join(granted)}"
            + (" (from the chain)" if derived else "")
        )
    if secret:
        lines.append(f"provider keys secret: {secret}")
    elif secret_arn == REMOVE:
        lines.append("provider keys secret: none (SECRET_ARN=none removes the stack's)")
    else:
        lines.append("provider keys secret: not given (a new stack has none; an existing one keeps its own)")
    if keyed and not secret:
        lines.append(
            f"warning: {', '.join(keyed)} models need keys; without a secret they are skipped (make secret)"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name in ("--mode", "--arch"):
        parser.add_argument(name, required=True)
    for name in ("--secret-arn", "--model-chain", "--bedrock-models"):
        parser.add_argument(name, default="")
    parser.add_argument("params", nargs="*", help="PARAMS: more Key=Value overrides, passed as given")
    args = parser.parse_args(argv)
    try:
        words, lines = overrides(
            args.mode, args.arch, args.secret_arn, args.model_chain, args.bedrock_models, args.params
        )
    except Refused as exc:
        print(f"make deploy: {exc}", file=sys.stderr)
        return 1
    print("\n".join(lines), file=sys.stderr)
    print(" ".join(words))
    return 0


if __name__ == "__main__":
    sys.exit(main())
