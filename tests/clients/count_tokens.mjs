// Token counts with OpenAI's o200k_base encoding (GPT-4o, GPT-4.1, gpt-oss), offline: the bench compares the
// context estimator with them. Reads a JSON list of conversations on stdin, prints a JSON list of counts.
import { countTokens } from "gpt-tokenizer/encoding/o200k_base";

let input = "";
for await (const chunk of process.stdin) input += chunk;
const counts = JSON.parse(input).map((messages) =>
  // Chat framing as OpenAI's cookbook counts it: about 4 tokens a message and 3 to prime the reply; a tool call
  // as its name and arguments plus a few tokens of framing (templates render calls, not their JSON envelope).
  messages.reduce((sum, m) => {
    const content = typeof m.content === "string" ? m.content : m.content ? JSON.stringify(m.content) : "";
    const calls = (m.tool_calls ?? []).reduce(
      (n, c) => n + 3 + countTokens(c.function.name) + countTokens(c.function.arguments),
      0,
    );
    return sum + 4 + countTokens(content) + calls;
  }, 3),
);
console.log(JSON.stringify(counts));
