// The Vercel AI SDK, unchanged, asking for `toolChoice: 'required'` with one client tool on a question that makes
// chatloop run execute_javascript first: the turn must still end with a call to the client's tool (the SDK raises
// AI_ToolChoiceViolationError otherwise). Run by tests/clients/test_openai_contract.py:
//   node tool_choice.mjs <6|7> <responses|chat> [generate|stream]
// with CHATLOOP_BASE_URL (the app's /v1) and CHATLOOP_MODEL. v6 is `ai` + `@ai-sdk/openai`; the newest major, v7, is
// installed beside it as `ai-v7` + `@ai-sdk/openai-v4` (package.json aliases). Prints one JSON line.
import { z } from "zod";

const [major, api] = process.argv.slice(2);
const ai = await import(major === "7" ? "ai-v7" : "ai");
const { createOpenAI } = await import(major === "7" ? "@ai-sdk/openai-v4" : "@ai-sdk/openai");

const provider = createOpenAI({ baseURL: process.env.CHATLOOP_BASE_URL, apiKey: "unused" });
const name = process.env.CHATLOOP_MODEL ?? "chatloop";
const model = api === "chat" ? provider.chat(name) : provider.responses(name);

// No execute: a call to it comes back to the caller, as structured output through a tool does.
const recordInterest = ai.tool({
  description: "Record the result of a compound interest calculation",
  inputSchema: z.object({
    principal: z.number(),
    rate_percent: z.number(),
    years: z.number().int(),
    total: z.number(),
  }),
});

// "generate" (default) or "stream": streamText reads the Responses API's events, the server's run's among them.
const mode = process.argv[4] ?? "generate";
const request = {
  model,
  prompt: "What is 1000 at 5% compounded yearly for 15 years?",
  tools: { record_interest: recordInterest },
  toolChoice: "required",
};

async function run() {
  if (mode !== "stream") return ai.generateText(request);
  const result = ai.streamText({ ...request, onError: () => {} });
  let text = "";
  for await (const part of result.fullStream) {
    if (part.type === "error") throw part.error;
    if (part.type === "text-delta") text += part.text ?? part.delta ?? "";
  }
  return { text, finishReason: await result.finishReason, steps: await result.steps };
}

try {
  const r = await run();
  const calls = r.steps.flatMap((s) => s.toolCalls);
  console.log(
    JSON.stringify({
      ok: true,
      finishReason: r.finishReason,
      text: r.text,
      clientCalls: calls.filter((c) => !c.providerExecuted).map((c) => ({ name: c.toolName, input: c.input })),
      hostedCalls: calls.filter((c) => c.providerExecuted).map((c) => c.toolName),
    }),
  );
} catch (error) {
  console.log(JSON.stringify({ ok: false, name: error?.name, error: String(error?.message ?? error) }));
  process.exitCode = 1;
}
