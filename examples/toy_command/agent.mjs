// The toy agent as a program in JavaScript (Node 18+, no packages): fulmen runs it once per
// rollout with the task in $FULMEN_TASK_FILE and its model endpoint in $OPENAI_BASE_URL.
// It asks the model once and leaves the answer in answer.txt for the verifier.
import { readFileSync, writeFileSync } from "node:fs";

const task = JSON.parse(readFileSync(process.env.FULMEN_TASK_FILE, "utf8"));
const response = await fetch(`${process.env.OPENAI_BASE_URL}/chat/completions`, {
  method: "POST",
  headers: {
    "content-type": "application/json",
    authorization: `Bearer ${process.env.OPENAI_API_KEY}`,
  },
  body: JSON.stringify({
    model: process.env.FULMEN_MODEL,
    messages: [{ role: "user", content: task.prompt }],
    max_tokens: 8,
  }),
});
if (!response.ok) {
  console.error(`model call failed: ${response.status} ${await response.text()}`);
  process.exit(1);
}
const reply = await response.json();
const answer = reply.choices[0].message.content ?? "";
writeFileSync("answer.txt", answer);
console.log(answer);
