"""What the AWS scripts share: a boto3 client for AWS_REGION (and AWS_ENDPOINT_URL, which boto3 reads itself), and
AWS errors reported as one line instead of a traceback."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

import boto3
from botocore.exceptions import BotoCoreError, ClientError


def client(service: str):
    return boto3.client(
        service, region_name=os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    )


def run(main: Callable[[], int], script: str) -> None:
    try:
        sys.exit(main())
    except (BotoCoreError, ClientError) as exc:  # no credentials, no network, access denied
        sys.exit(f"{Path(script).name}: {exc}")
