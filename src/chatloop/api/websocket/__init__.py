"""WebSocket mode of the Responses API (``wss://…/v1/responses``): ``session.answer`` answers one client message
on a socket, whichever transport carries it (``session``: transport-neutral; ``messages``: client events and error
events; ``door``: the Responses door over a socket; ``route``: the local Starlette route under uvicorn). The Lambda
transport (API Gateway's WebSocket API) is built on ``session`` too."""
