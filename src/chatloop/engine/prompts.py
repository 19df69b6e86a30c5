"""The words the engine adds to a conversation, and the user-facing fallback answer.

Kept in one place so they can be read (and changed) together. Messages the engine adds are
``system`` messages: they never start a new user turn.
"""

from __future__ import annotations

from collections.abc import Mapping

from chatloop.engine.messages import Message
from chatloop.engine.summary import DecisionReason, StopReason

FINAL_ANSWER_NOTES = {
    DecisionReason.DUPLICATE_LOOP: "You asked for the same tool call again.",
    DecisionReason.RESULT_LOOP: "The tools keep returning the same result.",
    DecisionReason.BUDGET_EXHAUSTED: "The tool budget for this question is used up.",
    DecisionReason.JS_ALREADY_SUCCEEDED: "{answered} already returned a result for this question.",
    DecisionReason.DEADLINE: "There is no time left for more tool calls.",
    DecisionReason.LEGACY_SYNTAX: "Tool calls written as text cannot be run.",
    DecisionReason.NOT_AN_ANSWER: "Repeating tool output or tool definitions is not an answer.",
    DecisionReason.CLIENT_TOOL_REQUIRED: "Your reply must be a tool call, not plain text.",
}

EMPTY_REPLY_NUDGE = "Your last reply was empty. Answer the user's last message now."

LEGACY_SYNTAX_REMINDER = (
    "Your previous reply wrote a tool call as text (like <tool_call> or <function=...>), which cannot be run. If you need a "
    "tool, answer with a tool call in the official function-calling format with valid JSON arguments and no "
    "extra text; otherwise answer the user in plain text."
)

NOT_AN_ANSWER_REMINDER = (
    "Your previous reply repeated tool output, the tool definitions or a call to a tool that does not exist "
    "instead of answering. If you need a tool, "
    "call it in the official function-calling format; otherwise answer the user's question in plain text, "
    "continuing from what you already said."
)

STOP_PHRASES = {
    StopReason.ITERATION_CAP: "I reached the limit of steps I can take for one question before I had a final answer.",
    StopReason.DEADLINE: "I ran out of time for this request before I had a final answer.",
    StopReason.LOOP_DETECTED: "I kept repeating the same step without getting closer to an answer.",
    StopReason.TOOL_BUDGET: "I used up the tool budget for this question before I had a final answer.",
    StopReason.ERROR: "The model returned no usable answer.",
    StopReason.ALL_MODELS_FAILED: "No model was available to answer right now.",
    StopReason.BUDGET: "I reached this account's usage limit before I had a final answer.",
}


def not_run(kind: str, *, name: str, arguments: str, cap: int | None, available: list[str]) -> str:
    """The error text a tool call gets when it is answered without running (``kind`` is its disposition)."""
    if kind == "invalid_arguments":
        return f"InvalidArguments: the arguments are not a JSON object: {arguments[:120]!r}"
    if kind == "js_already_succeeded":
        return f"NotRun: {name} already returned a result for this question; use it to answer"
    if kind == "over_budget":
        return f"BudgetExhausted: {name} may run at most {cap} times per question"
    if kind == "client":
        return "NotRun: client tools cannot run in this batch"
    if kind == "approval":
        return "NotRun: another call of this batch is waiting for the user's approval"
    return f"UnknownTool: {name!r} is not available; available tools: {available}"


def denied(reason: str | None) -> str:
    """What a call the user did not approve is answered with (their reason, when they gave one)."""
    why = f" Their reason: {reason}" if reason else ""
    return f"NotApproved: the user did not approve this call, so it did not run.{why}"


def with_guidance(messages: list[Message], guidance: str) -> list[Message]:
    """The conversation with ``guidance`` appended to its first system message (or a new one first)."""
    out = [dict(m) for m in messages]
    for message in out:
        if message["role"] == "system":
            message["content"] = f"{message['content']}\n\n{guidance}" if message["content"] else guidance
            return out
    return [{"role": "system", "content": guidance}, *out]


def final_answer_note(
    reason: DecisionReason, client_tools: list[str] | None = None, answered: list[str] | None = None
) -> str:
    """The note before the turn's last model call. With ``client_tools`` (the client's ``tool_choice`` requires
    one of them), that call must end in a call to one of those tools instead of plain text. ``answered``: the tools
    whose success answered the question."""
    why = FINAL_ANSWER_NOTES.get(reason, "Tool use is finished for this question.")
    why = why.format(answered=", ".join(answered or []) or "A tool")
    if client_tools:
        names = ", ".join(client_tools)
        return (
            f"{why} The server's own tools are finished. Using the results above, now call one of these "
            f"tools as the request requires: {names}."
        )
    return f"{why} Do not call any tools. Answer the user now, using the tool results above."


def fallback_text(
    stop_reason: StopReason,
    tool_counts: Mapping[str, int],
    last_error: str | None = None,
    last_result: str | None = None,
) -> str:
    """The answer a user gets when no model answer could be had (seed 002's graceful cap)."""
    phrase = STOP_PHRASES.get(stop_reason, "I could not finish this answer.")
    if tool_counts:
        tried = "I " + ", ".join(f"ran {name} {count}×" for name, count in sorted(tool_counts.items()))
    else:
        tried = "I didn't complete any tool calls"
    text = f"{phrase} Here's what I tried: {tried}"
    if last_error:
        text += f'; the last attempt failed with "{_short(last_error)}"'
    text += "."
    if last_result:
        text += f" The last result I got was: {_short(last_result, 300)}."
    text += (
        " You could (a) rephrase the question or split it into smaller steps, (b) ask again in a moment, or "
        "(c) give a more specific example of what you need."
    )
    return text


def _short(text: str, limit: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
