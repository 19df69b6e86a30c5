"""Create or update the provider keys secret (``make secret``) from GROQ_API_KEY / OPENAI_API_KEY in the environment.

The keys go to Secrets Manager through boto3, never on a command line (where ``ps`` would show them), and are never
printed. Prints the secret's ARN, which is what ``make deploy SECRET_ARN=...`` takes.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import boto3
from botocore.exceptions import BotoCoreError, ClientError


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--name", required=True)
    args = parser.parse_args()
    keys = {k: os.environ[k] for k in ("GROQ_API_KEY", "OPENAI_API_KEY") if os.environ.get(k)}
    if not keys:
        print("set GROQ_API_KEY and/or OPENAI_API_KEY in your environment first", file=sys.stderr)
        return 1
    client = boto3.client(
        "secretsmanager", region_name=os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    )
    try:
        arn = client.create_secret(Name=args.name, SecretString=json.dumps(keys))["ARN"]
        action = "created"
    except client.exceptions.ResourceExistsException:
        arn = client.put_secret_value(SecretId=args.name, SecretString=json.dumps(keys))["ARN"]
        action = "updated"
    print(f"{action} {args.name} with {', '.join(sorted(keys))}: SECRET_ARN={arn}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (BotoCoreError, ClientError) as exc:  # no credentials, no network, access denied: one clear line
        sys.exit(f"{Path(__file__).name}: {exc}")
