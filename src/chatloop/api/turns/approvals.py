"""Tool approvals, the API's side: which tools wait for a person this turn, approval ids sealed to the caller and
the call, and the answers a request gives, each checked before anything runs.

- **Which tools.** A client MCP server's ``require_approval`` (OpenAI's forms: ``"always"``, ``"never"``, or
  ``{"always": {"tool_names": [...]}, "never": {"tool_names": [...]}}``; left out: ``"always"``, OpenAI's default),
  and the operator's APPROVAL_REQUIRED_TOOLS for the server's own tools (``execute_javascript``, MCP_SERVERS'
  ``label__tool`` or ``label__*``). In the filter form a tool named under ``never`` runs unasked, one named under
  ``always`` waits, and any other waits too unless only ``always`` was given.
- **Sealed ids.** An approval request's id is ``mcpr_`` + a nonce + an HMAC (a key from ``statekey``) of the nonce,
  the caller, the tool's offered name, the arguments and the MCP server's identity (``server_identity``: its URL,
  header names and a keyed hash of each value): an approval request item a client made up, or another caller's, or
  one whose arguments were changed, or answered by a request that names its label at another server (or with other
  headers), does not verify, wherever the item comes from (a stored chain, a conversation, or the client's own
  input, as the Agents SDK sends it back). A caller with no identity is asked nothing: an id sealed to no one would
  be anyone's (``ask_for``; a client server that would ask is a 400 in ``client_servers``).
- **Answers.** An ``mcp_approval_response`` in the request's input is a new answer unless the items already show
  it acted upon (an ``mcp_call`` carrying its id, or the sandbox run of it). Each new answer must name a sealed
  request among the items (else a 400: never requested, or not this caller's), appear once, and be claimed in the
  store (``Store.claims``: one use, across processes): an approval answered before is a 400 and runs nothing; a
  denial answered before is only the history it is (nothing runs either way).

Usage::

    rule = approval_rule(tool.require_approval, "tools[0].require_approval")     # a 400 for a shape it cannot read
    answers = await answers_of(ctx, items, start)                 # ApprovalAnswers to run first, ids they answer
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from chatloop.api.http.errors import RequestError
from chatloop.api.items.approvals import BUILTIN_LABEL, McpApprovalRequestInput, McpApprovalResponseInput
from chatloop.api.items.inputs import CodeInterpreterCallItem, InputItem
from chatloop.api.items.mcp import McpCallInput
from chatloop.api.items.store import store_errors
from chatloop.api.turns.statekey import state_key
from chatloop.engine.approvals import APPROVAL_ID_PREFIX, ApprovalAnswer
from chatloop.observability import logger
from chatloop.providers.base import ToolCall
from chatloop.tools.mcp.naming import NAME_SEPARATOR

if TYPE_CHECKING:
    from chatloop.api.http.context import RequestContext
    from chatloop.config import MCPServerConfig, Settings
    from chatloop.engine.request import TurnRequest
    from chatloop.tools.base import ToolRegistry
    from chatloop.tools.mcp import MCPTool

PURPOSE = "approvals"
_NONCE_HEX = 24
_MAC_HEX = 40


# --- which tools --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ApprovalRule:
    """A client MCP server's ``require_approval``: whether each of its tools (by its own name) waits."""

    others: bool
    always: frozenset[str] = frozenset()
    never: frozenset[str] = frozenset()

    def requires(self, tool: str) -> bool:
        if tool in self.never:
            return False
        return tool in self.always or self.others

    def asks(self) -> bool:
        """Whether any tool of the server may wait for a person."""
        return self.others or bool(self.always)


def approval_rule(value: object, param: str) -> ApprovalRule:
    """``require_approval`` read (a 400 naming ``param`` for a shape this server does not take, such as the
    ``read_only`` filter)."""
    if value is None or value == "always":
        return ApprovalRule(others=True)
    if value == "never":
        return ApprovalRule(others=False)
    if isinstance(value, dict) and value and set(value) <= {"always", "never"}:
        names = {kind: _tool_names(value[kind], f"{param}.{kind}") for kind in value}
        always, never = names.get("always", frozenset()), names.get("never", frozenset())
        return ApprovalRule(others=set(value) != {"always"}, always=always, never=never)
    raise RequestError(
        400,
        "invalid_request",
        f'{param} must be "always", "never" or {{"always": {{"tool_names": [...]}}, "never": {{...}}}}',
        param,
    )


def _tool_names(value: object, param: str) -> frozenset[str]:
    if isinstance(value, dict) and set(value) <= {"tool_names"}:
        names = value.get("tool_names", [])
        if isinstance(names, list) and all(isinstance(n, str) and n for n in names):
            return frozenset(names)
    raise RequestError(
        400, "invalid_request", f'{param} must be {{"tool_names": [...]}} (read_only is not supported)', param
    )


def approval_required(
    settings: Settings,
    registry: ToolRegistry,
    mcp_tools: Sequence[MCPTool],
    client_rules: Mapping[str, ApprovalRule],
) -> frozenset[str]:
    """The turn's tools (offered names) whose calls wait for a person: the operator's list over every tool, and
    each client server's rule over its own."""
    names = {name for name in registry.names() if settings.approval_required(name)}
    for tool in mcp_tools:
        rule = client_rules.get(tool.source)
        if rule is not None and rule.requires(tool.source_name):
            names.add(tool.name)
    return frozenset(names)


async def ask_for(
    ctx: RequestContext,
    turn: TurnRequest,
    registry: ToolRegistry,
    mcp_tools: Sequence[MCPTool],
    rules: Mapping[str, ApprovalRule],
    servers: Sequence[MCPServerConfig] = (),
) -> None:
    """Set which of the turn's tools wait for a person, and seal the ids it asks with to this caller and the
    server each tool is at (``servers``: the request's own; the operator's are known)."""
    if ctx.caller is None:
        # No identity: an approval could not be answered (its claim needs a caller), and one sealed to no one
        # would be anyone's. A client server that asks was refused (``client_servers``); the operator's tools
        # that wait are not offered, as on a route with no way to ask.
        kept = without_approval(ctx.runtime.settings, registry, turn.tool_names)
        if kept is not turn.tool_names:
            logger.info("approval-required tools are not offered: the caller has no identity to approve with")
            turn.tool_names = kept
        return
    turn.approval_required = approval_required(ctx.runtime.settings, registry, mcp_tools, rules)
    if turn.approval_required:
        turn.approval_id = (await sealer_for(ctx, servers)).approval_id


def without_approval(settings: Settings, registry: ToolRegistry, names: list[str] | None) -> list[str] | None:
    """``names`` (None: every tool) less the tools APPROVAL_REQUIRED_TOOLS names: for a route with no way to ask
    (chat completions is stateless and has no item to ask with)."""
    enabled = registry.names() if names is None else names
    kept = [n for n in enabled if not settings.approval_required(n)]
    return names if len(kept) == len(enabled) else kept


# --- sealed ids ---------------------------------------------------------------------------------------------
class Sealer:
    """Seals approval ids to a caller, a call and the server it runs at (``approval_id``) and checks them
    (``verifies``). ``servers``: each MCP server's identity by label (``server_identity``); a built-in tool has
    none."""

    def __init__(self, key: bytes, owner: str, servers: Mapping[str, str] | None = None):
        self._key, self._owner, self._servers = key, owner, dict(servers or {})

    def approval_id(self, call: ToolCall) -> str:
        nonce = secrets.token_hex(_NONCE_HEX // 2)
        label, sep, _ = call.name.partition(NAME_SEPARATOR)
        server = self._servers.get(label, "") if sep else ""
        return f"{APPROVAL_ID_PREFIX}{nonce}{self._mac(nonce, call.name, call.arguments, server)}"

    def verifies(self, request: McpApprovalRequestInput) -> bool:
        sealed = request.id.removeprefix(APPROVAL_ID_PREFIX)
        if not request.id.startswith(APPROVAL_ID_PREFIX) or len(sealed) != _NONCE_HEX + _MAC_HEX:
            return False
        nonce, mac = sealed[:_NONCE_HEX], sealed[_NONCE_HEX:]
        server = "" if request.server_label == BUILTIN_LABEL else self._servers.get(request.server_label, "")
        expected = self._mac(nonce, request.offered_name(), request.arguments, server)
        return hmac.compare_digest(mac, expected)

    def _mac(self, nonce: str, name: str, arguments: str, server: str) -> str:
        message = "\x00".join([nonce, self._owner, name, arguments, server]).encode("utf-8", "surrogatepass")
        return hmac.new(self._key, message, hashlib.sha256).hexdigest()[:_MAC_HEX]


def server_identity(key: bytes, server: MCPServerConfig) -> str:
    """What an approval for one of ``server``'s tools is bound to: its URL, and its headers' names with a keyed
    hash of each value (the credentials themselves are in no id, and a changed one is another server)."""
    headers = sorted((name.lower(), value) for name, value in server.headers.items())
    named = [[name, hmac.new(key, value.encode(), hashlib.sha256).hexdigest()] for name, value in headers]
    canonical = json.dumps([server.url, named], separators=(",", ":"))
    return hmac.new(key, canonical.encode(), hashlib.sha256).hexdigest()


async def sealer_for(ctx: RequestContext, servers: Sequence[MCPServerConfig] = ()) -> Sealer:
    """This caller's sealer, over the operator's MCP servers and the request's own ``servers`` (the key is read
    once per container)."""
    key = await state_key(ctx.runtime, PURPOSE)
    every = [*ctx.runtime.settings.mcp_servers, *servers]
    return Sealer(key, ctx.caller or "", {s.label: server_identity(key, s) for s in every})


# --- answers ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Answers:
    """A request's new answers (run before its first model call) and the ids they answer (its other answers
    are history)."""

    answers: tuple[ApprovalAnswer, ...] = ()

    @property
    def ids(self) -> frozenset[str]:
        return frozenset(a.call.id for a in self.answers)


async def answers_of(
    ctx: RequestContext, items: Sequence[InputItem], start: int, servers: Sequence[MCPServerConfig] = ()
) -> Answers:
    """The new answers among ``items[start:]`` (the request's input; ``items[:start]`` is the history it
    continues), every one checked against the MCP servers the request names (``servers``: an approval runs only
    at the server it was asked for); a 400 (or 401 with no caller) before anything runs otherwise."""
    given = [
        (i, item) for i, item in enumerate(items) if i >= start and isinstance(item, McpApprovalResponseInput)
    ]
    if not given:
        return Answers()
    requests = {item.id: item for item in items if isinstance(item, McpApprovalRequestInput)}
    sealer = await sealer_for(ctx, servers)
    fresh: list[tuple[McpApprovalRequestInput, McpApprovalResponseInput]] = []
    for index, answer in given:
        rid = answer.approval_request_id
        param = f"input[{index - start}].approval_request_id"
        request = requests.get(rid)
        if request is None or not sealer.verifies(request):
            raise RequestError(
                400,
                "invalid_request",
                f"{param}: {rid!r} names no approval request this server made for this caller at this MCP "
                "server (the server_url and headers it was asked with)",
                param,
            )
        later = items[index + 1 :]
        acted = any(
            (isinstance(i, McpCallInput) and i.approval_request_id == rid)
            or (isinstance(i, CodeInterpreterCallItem) and i.call_id() == rid)
            for i in later
        )
        if acted:
            continue
        if any(r.id == rid for r, _ in fresh):
            raise RequestError(400, "invalid_request", f"{param}: {rid!r} is answered twice", param)
        fresh.append((request, answer))
    if not fresh:
        return Answers()
    claimed = await _claim(ctx, [r.id for r, _ in fresh])
    answers: list[ApprovalAnswer] = []
    for (request, answer), first in zip(fresh, claimed, strict=True):
        if not first and answer.approve:
            raise RequestError(
                400,
                "invalid_request",
                f"{request.id!r} was already answered; an approval is used once",
                "input",
            )
        if first:
            call = ToolCall(request.id, request.offered_name(), request.arguments)
            answers.append(ApprovalAnswer(call, answer.approve, answer.reason))
    return Answers(tuple(answers))


async def _claim(ctx: RequestContext, ids: Sequence[str]) -> list[bool]:
    """Each id's one use recorded in the store: True where this request is the first. A turn whose answers were
    claimed before it runs here (``ctx.prior.claimed``: a background job's, checked and claimed when it was queued)
    has that request's claims."""
    if ctx.prior.claimed:
        return [True] * len(ids)
    if ctx.caller is None:
        raise RequestError(
            401, "unauthenticated", "answering an approval needs a caller (an API key or identity)"
        )
    store = ctx.runtime.stores.conversations()
    deadline = ctx.store_deadline()
    with store_errors():
        return [await store.claims.claim(ctx.caller, f"apr_{rid}", deadline) for rid in ids]


async def give_back(ctx: RequestContext, answers: Sequence[ApprovalAnswer]) -> None:
    """Give back the claims of ``answers`` whose turn was refused before anything ran (a budget's 429): each
    answer may be sent again, and is still used once."""
    if not answers or ctx.caller is None:
        return
    store = ctx.runtime.stores.conversations()
    with store_errors():
        for answer in answers:
            await store.claims.release(ctx.caller, f"apr_{answer.call.id}", ctx.store_deadline())
