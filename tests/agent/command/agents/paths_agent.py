"""A command agent whose one prompt names where it runs, as coding agents' system prompts do."""

import json
import os
import urllib.request

where = f"cwd {os.getcwd()}; home {os.environ['HOME']}; task {os.environ['FULMEN_TASK_FILE']}"
body = {"model": os.environ["FULMEN_MODEL"], "messages": [{"role": "user", "content": where}]}
request = urllib.request.Request(
    os.environ["OPENAI_BASE_URL"] + "/chat/completions",
    data=json.dumps(body).encode(),
    headers={
        "Content-Type": "application/json",
        "Authorization": f"Bearer {os.environ['OPENAI_API_KEY']}",
    },
)
with urllib.request.urlopen(request, timeout=30) as response:
    print(json.loads(response.read())["choices"][0]["message"]["content"])
