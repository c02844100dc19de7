"""Verifier: its reward first (as JSON, or into $FULMEN_REWARD_FILE), then the agent's answer.

Echoing what the agent wrote after its own line is what real verifiers do (test logs); the
reward must still be the verifier's.
"""

import json
import os
import sys

with open(os.environ["FULMEN_TASK_FILE"]) as f:
    task = json.load(f)
try:
    with open("answer.txt") as f:
        answer = f.read()
except OSError as exc:
    answer = f"unreadable: {exc.strerror}"
reward = {"reward": float(answer.strip() == task["expect"])}
if sys.argv[1:] == ["file"]:
    with open(os.environ["FULMEN_REWARD_FILE"], "w") as f:
        json.dump(reward, f)
else:
    print(json.dumps(reward), flush=True)
print(answer)
