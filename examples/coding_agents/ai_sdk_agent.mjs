// A small coding agent on the Vercel AI SDK (npm `ai` 6), trained by fulmen as a command agent.
//
//   node ai_sdk_agent.mjs "TASK"
//
// It reaches the model only through the endpoint fulmen puts in its environment
// ($OPENAI_BASE_URL, $OPENAI_API_KEY, $FULMEN_MODEL), on Chat Completions with the SDK's
// OpenAI-compatible provider. The model gets one tool, write_file, which writes into the
// working directory; up to four steps; the final text goes to stdout.
import { writeFileSync } from "node:fs";
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { generateText, jsonSchema, stepCountIs, tool } from "ai";

const task = process.argv[2];
if (!task) {
  console.error('usage: node ai_sdk_agent.mjs "TASK"');
  process.exit(2);
}
const env = process.env;
const model = createOpenAICompatible({
  name: "fulmen",
  baseURL: env.OPENAI_BASE_URL,
  apiKey: env.OPENAI_API_KEY,
})(env.FULMEN_MODEL);

const writeFile = tool({
  description: "Write a text file in the working directory.",
  inputSchema: jsonSchema({
    type: "object",
    properties: { path: { type: "string" }, content: { type: "string" } },
    required: ["path", "content"],
    additionalProperties: false,
  }),
  execute: async ({ path, content }) => {
    writeFileSync(path, content);
    return `wrote ${content.length} characters to ${path}`;
  },
});

const { text } = await generateText({
  model,
  system: "You are a careful coding assistant. Use the tools to do the task, then answer briefly.",
  prompt: task,
  tools: { write_file: writeFile },
  stopWhen: stepCountIs(4),
  maxOutputTokens: 256,
});
console.log(text);
