"""The toy task's verifier: the letters "a" in answer.txt per token of budget, as a JSON line.

fulmen runs it after the agent, in the agent's working directory (standard library only).
"""

import json

MAX_TOKENS = 8

try:
    with open("answer.txt", encoding="utf-8") as f:
        answer = f.read()
except FileNotFoundError:
    answer = ""
print(json.dumps({"reward": min(1.0, answer.count("a") / MAX_TOKENS)}))
