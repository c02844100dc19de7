"""Verifier: exit 0 when the task's file holds the task's expected text, else 1."""

import json
import os
import sys
from pathlib import Path

with open(os.environ["FULMEN_TASK_FILE"]) as f:
    task = json.load(f)
path = Path(task["file"])
found = path.read_text().strip() if path.is_file() else None
print(f"{path}: {found!r}, expected {task['expect']!r}")
sys.exit(0 if found == task["expect"] else 1)
