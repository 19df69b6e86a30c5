// The Vercel AI SDK v6 (`ai` + `@ai-sdk/openai`), unchanged, against chatloop: run by tests/clients/test_real_clients.py with
// CHATLOOP_BASE_URL (the app's /v1) and one scenario name; prints one JSON line with what the SDK returned.
import { createOpenAI } from "@ai-sdk/openai";
import { generateObject, generateText, stepCountIs, streamText, tool } from "ai";
import { z } from "zod";

const provider = createOpenAI({ baseURL: process.env.CHATLOOP_BASE_URL, apiKey: "unused" });
const model = process.env.CHATLOOP_MODEL ?? "demo:offline";
const question = "calculate 5! and 10!";

async function streamed(result) {
  let text = "";
  for await (const piece of result.textStream) text += piece;
  return { text, finishReason: await result.finishReason, usage: await result.usage };
}

const weather = tool({
  description: "Current weather for a city",
  inputSchema: z.object({ city: z.string() }),
  execute: async ({ city }) => ({ temp: 7, city }),
});

async function generated(languageModel) {
  const r = await generateText({ model: languageModel, prompt: question });
  return { text: r.text, finishReason: r.finishReason, usage: r.usage };
}

// The SDK runs its own tool (execute) between steps: a function_call / tool_calls reply, then the result sent back.
async function withTools(languageModel) {
  const r = await generateText({
    model: languageModel,
    prompt: "What is the weather in Oslo?",
    tools: { get_weather: weather },
    stopWhen: stepCountIs(3),
  });
  return { text: r.text, steps: r.steps.length, calls: r.steps.flatMap((s) => s.toolCalls.map((c) => c.toolName)) };
}

// createOpenAI(...)(model) is the Responses API in v6; .chat(model) is chat completions.
const scenarios = {
  generateResponses: () => generated(provider(model)),
  streamResponses: () => streamed(streamText({ model: provider(model), prompt: question })),
  generateChat: () => generated(provider.chat(model)),
  streamChat: () => streamed(streamText({ model: provider.chat(model), prompt: question })),
  toolsResponses: () => withTools(provider(model)),
  toolsChat: () => withTools(provider.chat(model)),
  objectResponses: async () => {
    const r = await generateObject({
      model: provider(model),
      schema: z.object({ name: z.string(), age: z.number().int() }),
      prompt: "Alice is 30 years old.",
    });
    return { object: r.object };
  },
};

const name = process.argv[2];
try {
  console.log(JSON.stringify({ ok: true, ...(await scenarios[name]()) }));
} catch (error) {
  console.log(JSON.stringify({ ok: false, error: String(error?.message ?? error), data: error?.responseBody }));
  process.exitCode = 1;
}
