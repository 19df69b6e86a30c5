#!/bin/sh
# Stream mode's Lambda handler. With AWS_LAMBDA_EXEC_WRAPPER=/opt/bootstrap the Lambda Web Adapter layer starts
# this script, waits until AWS_LWA_READINESS_CHECK_PATH answers on AWS_LWA_PORT, then forwards each invocation to the
# app as HTTP, streaming the response when AWS_LWA_INVOKE_MODE=response_stream (awslabs/aws-lambda-web-adapter
# README and examples/fastapi-response-streaming-zip: `exec python -m uvicorn --port=$PORT main:app`). The Lambda
# context reaches the app in the x-amzn-lambda-context header (chatloop/api/http/adapter.py).
here=$(dirname "$0")
export PYTHONPATH="${LAMBDA_TASK_ROOT:-$here}:/opt/python${PYTHONPATH:+:$PYTHONPATH}"
# The adapter's x-amzn-* headers are trusted only when Lambda started this script under the adapter (the exec
# wrapper, and the runtime API Lambda sets): run anywhere else, a client could write them. --no-proxy-headers keeps
# the peer address the socket's, so the app can check that the adapter's requests come over loopback.
if [ "${AWS_LAMBDA_EXEC_WRAPPER:-}" = /opt/bootstrap ] && [ -n "${AWS_LAMBDA_RUNTIME_API:-}" ]; then
  export TRUST_ADAPTER_HEADERS="${TRUST_ADAPTER_HEADERS:-1}"
fi
exec python3 -m uvicorn app:app --app-dir "${LAMBDA_TASK_ROOT:-$here}" \
  --host 127.0.0.1 --port "${AWS_LWA_PORT:-${PORT:-8080}}" --no-access-log --timeout-keep-alive 120 \
  --no-proxy-headers
