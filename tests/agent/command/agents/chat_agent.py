"""A command agent in plain Python (standard library only): one chat call, the answer in a file.

Reads its task from $FULMEN_TASK_FILE, asks $OPENAI_BASE_URL, writes the reply to answer.txt,
prints it, and reports what it saw of its environment on stderr as JSON (for the tests).
With ``"post_reward"`` in the task it posts that reward to $FULMEN_REWARD_URL itself.
"""

import json
import os
import sys
import urllib.request


def post(url: str, body: dict, key: str) -> dict:
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {key}"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


with open(os.environ["FULMEN_TASK_FILE"]) as f:
    task = json.load(f)
key = os.environ["OPENAI_API_KEY"]
reply = post(
    os.environ["OPENAI_BASE_URL"] + "/chat/completions",
    {"model": os.environ["FULMEN_MODEL"], "messages": [{"role": "user", "content": task["q"]}]},
    key,
)
answer = reply["choices"][0]["message"]["content"]
with open("answer.txt", "w") as f:
    f.write(answer)
print(answer)
if "post_reward" in task:
    post(
        os.environ["FULMEN_REWARD_URL"],
        {"rollout_id": os.environ["FULMEN_ROLLOUT_ID"], "values": {"reward": task["post_reward"]}},
        key,
    )
seen = {
    name: os.environ.get(name)
    for name in (
        "HOME",
        "FULMEN_ROLLOUT_ID",
        "FULMEN_ATTEMPT_ID",
        "ANTHROPIC_BASE_URL",
        "FULMEN_SECRET_OF_RUNNER",
        "EXTRA",
    )
}
seen["argv"] = sys.argv[1:]
seen["stdin"] = sys.stdin.read()
seen["cwd"] = os.getcwd()
print(json.dumps(seen), file=sys.stderr)
