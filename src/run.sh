#!/bin/sh
# Stream mode's Lambda handler. With AWS_LAMBDA_EXEC_WRAPPER=/opt/bootstrap the Lambda Web Adapter layer starts
# this script, waits until AWS_LWA_READINESS_CHECK_PATH answers on AWS_LWA_PORT, then forwards each invocation to the
# app as HTTP, streaming the response when AWS_LWA_INVOKE_MODE=response_stream (awslabs/aws-lambda-web-adapter
# README and examples/fastapi-response-streaming-zip: `exec python -m uvicorn --port=$PORT main:app`). The Lambda
# context reaches the app in the x-amzn-lambda-context header (chatloop/api/adapter.py).
here=$(dirname "$0")
export PYTHONPATH="${LAMBDA_TASK_ROOT:-$here}:/opt/python${PYTHONPATH:+:$PYTHONPATH}"
exec python3 -m uvicorn app:app --app-dir "${LAMBDA_TASK_ROOT:-$here}" \
  --host 127.0.0.1 --port "${AWS_LWA_PORT:-${PORT:-8080}}" --no-access-log --timeout-keep-alive 120
