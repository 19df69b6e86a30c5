"""Create or update the provider keys secret (``make secret``) from GROQ_API_KEY / OPENAI_API_KEY in the environment.

The keys go to Secrets Manager through boto3, never on a command line (where ``ps`` would show them), and are never
printed. Prints the secret's ARN, which is what ``make deploy SECRET_ARN=...`` takes.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from awsutil import client, run  # scripts/awsutil.py (a script runs with its folder on sys.path)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--name", required=True)
    args = parser.parse_args()
    keys = {k: os.environ[k] for k in ("GROQ_API_KEY", "OPENAI_API_KEY") if os.environ.get(k)}
    if not keys:
        print("set GROQ_API_KEY and/or OPENAI_API_KEY in your environment first", file=sys.stderr)
        return 1
    secrets_client = client("secretsmanager")
    try:
        arn = secrets_client.create_secret(Name=args.name, SecretString=json.dumps(keys))["ARN"]
        action = "created"
    except secrets_client.exceptions.ResourceExistsException:
        arn = secrets_client.put_secret_value(SecretId=args.name, SecretString=json.dumps(keys))["ARN"]
        action = "updated"
    print(f"{action} {args.name} with {', '.join(sorted(keys))}: SECRET_ARN={arn}")
    return 0


if __name__ == "__main__":
    run(main, __file__)
