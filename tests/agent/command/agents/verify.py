"""Verifier: reward 1 when answer.txt holds the task's expected answer (exit code, or JSON)."""

import json
import os
import sys

with open(os.environ["FULMEN_TASK_FILE"]) as f:
    task = json.load(f)
try:
    with open("answer.txt") as f:
        answer = f.read().strip()
except FileNotFoundError:
    answer = None
right = answer == task["expect"]
if sys.argv[1:] == ["json"]:
    print("checking...")
    agent_exit = float(os.environ["FULMEN_AGENT_EXIT_CODE"])
    print(json.dumps({"correct": float(right), "agent_exit": agent_exit}))
else:
    sys.exit(0 if right else 1)
