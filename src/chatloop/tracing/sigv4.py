"""SigV4 signing of OTLP exports, for X-Ray's OTLP endpoint (``https://xray.<region>.amazonaws.com/v1/traces``).

X-Ray takes OTLP/HTTP spans straight from the function when each request is signed with the function's credentials
(AWS docs, "X-Ray OTLP endpoint": SigV4, service ``xray``; Transaction Search enabled on the account). botocore signs;
the credentials are the runtime's (the role's), read when each export is signed, so a rotated session token is used.

Usage::

    session = requests.Session()
    session.auth = SigV4Auth("xray", "eu-west-1")
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import botocore.session
import requests.auth

if TYPE_CHECKING:
    from requests import PreparedRequest


class SigV4Auth(requests.auth.AuthBase):
    """A ``requests`` auth that signs each request (method, URL, headers and body) with SigV4."""

    def __init__(self, service: str, region: str) -> None:
        self.service = service
        self.region = region
        self._session: botocore.session.Session | None = None

    def __call__(self, request: PreparedRequest) -> PreparedRequest:
        from botocore.auth import SigV4Auth as BotoSigV4
        from botocore.awsrequest import AWSRequest

        if self._session is None:
            self._session = botocore.session.get_session()
        credentials = self._session.get_credentials()
        if credentials is None:  # nothing to sign with: sent as is, and refused (the exporter logs why)
            return request
        body = request.body if isinstance(request.body, bytes) else str(request.body or "").encode()
        headers = {
            k: v for k, v in request.headers.items() if k.lower() in {"content-type", "content-encoding"}
        }
        aws = AWSRequest(method=request.method or "POST", url=request.url, data=body, headers=headers)
        BotoSigV4(credentials.get_frozen_credentials(), self.service, self.region).add_auth(aws)
        request.headers.update(dict(aws.headers.items()))
        return request
