// A small agent on the Vercel AI SDK, run by fulmen as a command agent (tests/command_agents).
//
//   node ai_sdk_agent.mjs chat|responses|messages stream|generate "TASK"
//
// It reaches the model only through the endpoint fulmen puts in its environment, with one of
// the SDK's three providers: @ai-sdk/openai-compatible (Chat Completions, $OPENAI_BASE_URL),
// @ai-sdk/openai (Responses, $OPENAI_BASE_URL) or @ai-sdk/anthropic (Messages,
// $ANTHROPIC_BASE_URL + "/v1"), streamed (streamText) or not (generateText). The model gets one
// tool, write_file, which writes into the working directory; the final text goes to stdout.
import { writeFileSync } from "node:fs";
import { createAnthropic } from "@ai-sdk/anthropic";
import { createOpenAI } from "@ai-sdk/openai";
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { generateText, jsonSchema, stepCountIs, streamText, tool } from "ai";

const [api, mode, task] = process.argv.slice(2);
const env = process.env;
const apiKey = env.OPENAI_API_KEY;
const providers = {
  chat: () =>
    createOpenAICompatible({ name: "fulmen", baseURL: env.OPENAI_BASE_URL, apiKey })(
      env.FULMEN_MODEL,
    ),
  responses: () => createOpenAI({ baseURL: env.OPENAI_BASE_URL, apiKey }).responses(env.FULMEN_MODEL),
  messages: () =>
    createAnthropic({ baseURL: `${env.ANTHROPIC_BASE_URL}/v1`, apiKey: env.ANTHROPIC_API_KEY })(
      env.FULMEN_MODEL,
    ),
};
if (!(api in providers) || !["stream", "generate"].includes(mode) || !task) {
  console.error("usage: ai_sdk_agent.mjs chat|responses|messages stream|generate TASK");
  process.exit(2);
}

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
const request = {
  model: providers[api](),
  system: "You are a careful assistant. Use the tools to do the task.",
  prompt: task,
  tools: { write_file: writeFile },
  stopWhen: stepCountIs(4),
  maxOutputTokens: 256,
  maxRetries: 0,
};

let text;
if (mode === "generate") {
  text = (await generateText(request)).text;
} else {
  const result = streamText(request);
  for await (const part of result.fullStream) {
    if (part.type === "error") throw part.error; // streamText reports errors in the stream
  }
  text = await result.text;
}
if (!text) {
  console.error("the model's final answer was empty");
  process.exit(1);
}
console.log(text);
