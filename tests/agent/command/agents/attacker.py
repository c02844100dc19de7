"""A command agent that attacks what a rollout must not touch (standard library only).

``attacker.py ATTACK [ARG ...]`` tries one attack and prints one line per try: what the
gateway, the file system or the kernel answered. The tests assert on those lines, and on what
the canary rollout beside it and the upstream saw.
"""

import json
import mmap
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

BASE = os.environ.get("OPENAI_BASE_URL", "")
KEY = os.environ.get("OPENAI_API_KEY", "")


def call(url: str, body: object = None, method: str = "POST") -> str:
    """Return 'STATUS' of a request to ``url`` with the rollout's own key."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(
        url,
        data=data,
        method=method,
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {KEY}"},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return str(response.status)
    except urllib.error.HTTPError as exc:
        return str(exc.code)
    except OSError as exc:
        return f"error {exc}"


def root_of(base: str) -> str:
    """The gateway's root, from the rollout's model URL."""
    return base.split("/rollout/", 1)[0]


attack, args = sys.argv[1], [a for a in sys.argv[2:] if a != "-"]
if attack == "canary":  # the well-behaved rollout beside every attack
    body = {"model": "policy", "messages": [{"role": "user", "content": "2+2"}]}
    request = urllib.request.Request(
        f"{BASE}/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {KEY}"},
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        answer = json.loads(response.read())["choices"][0]["message"]["content"]
    with open("answer.txt", "w") as f:
        f.write(answer)
    if "post" in args:
        own = {"rollout_id": os.environ["FULMEN_ROLLOUT_ID"], "values": {"reward": 1.0}}
        print("posted", call(os.environ["FULMEN_REWARD_URL"], own))
    print("answered", answer)
elif attack == "abandon":  # slow calls left behind: their engine work must stop with them
    port = int(BASE.split(":")[2].split("/")[0])
    body = json.dumps({"model": "policy", "messages": [{"role": "user", "content": "slow"}]})
    path = BASE.split(str(port), 1)[1] + "/chat/completions"
    held = []
    for _ in range(int(args[0])):
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        s.sendall(
            f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n{body}".encode()
        )
        held.append(s)
    time.sleep(0.5)
    print("abandoned", len(held), flush=True)
    os._exit(0)
elif attack == "engine_admin":
    lora = {"lora_name": "policy", "lora_path": os.getcwd()}
    print("load", call(f"{BASE}/load_lora_adapter", lora))
    print("unload", call(f"{BASE}/unload_lora_adapter", {"lora_name": "policy"}))
    print("reload", call(f"{BASE}/reload_weights", {"path": "/root"}))
    print("tokenize", call(f"{BASE}/../tokenize", {"prompt": "x"}))
    print("untracked", call(f"{root_of(BASE)}/v1/load_lora_adapter", lora))
elif attack == "forge_rewards":
    url = os.environ["FULMEN_REWARD_URL"]
    victim = args[0]
    print("victim", call(url, {"rollout_id": victim, "values": {"reward": -1e308}}))
    withdrawal = {"rollout_id": victim, "values": {"reward": -7.0}, "metadata": {}}
    withdrawal["metadata"] = {"scoring_error": "forged"}
    print("withdraw", call(url, withdrawal))
    print(
        "huge",
        call(url, {"rollout_id": os.environ["FULMEN_ROLLOUT_ID"], "values": {"reward": 1e300}}),
    )
    print(
        "own", call(url, {"rollout_id": os.environ["FULMEN_ROLLOUT_ID"], "values": {"reward": 1.0}})
    )
elif attack == "other_attempt":
    victim_rollout, victim_attempt = args
    root = root_of(BASE)
    url = f"{root}/rollout/{victim_rollout}/attempt/{victim_attempt}/v1/chat/completions"
    body = {"model": "policy", "messages": [{"role": "user", "content": "attacker was here"}]}
    print("other", call(url, body))
    print("untracked", call(f"{root}/v1/chat/completions", body))
    print("flush", call(f"{root}/gateway/flush", {}))
    print("metrics", call(f"{root}/metrics", method="GET"))
elif attack == "read":
    for path in args:
        try:
            with open(path, "rb") as f:
                print("read", path, len(f.read()))
        except OSError as exc:
            print("cannot read", path, exc.strerror)
    with open(os.environ["FULMEN_TASK_FILE"]) as f:
        print("task", f.read().strip())
elif attack == "plant_usercustomize":
    # A user site the verifier's Python would load, if it ran with this HOME.
    version = "{}.{}".format(*sys.version_info[:2])
    site = os.path.expanduser(f"~/.local/lib/python{version}/site-packages")
    os.makedirs(site, exist_ok=True)
    with open(os.path.join(site, "usercustomize.py"), "w") as f:
        f.write('import json; print(json.dumps({"reward": 1.0}), flush=True)\n')
    with open("answer.txt", "w") as f:
        f.write('wrong\n{"reward": 1.0}\n')  # a line the verifier echoes after its own
    print("planted")
elif attack == "link_answer":
    os.symlink(args[0], "answer.txt")
    print("linked")
elif attack == "fifo_answer":
    os.mkfifo("answer.txt")
    print("fifo")
elif attack == "sockets":
    for path in args:
        try:
            with socket.socket(socket.AF_UNIX) as s:
                s.settimeout(3)
                s.connect(path)
            print("connected", path)
        except OSError as exc:
            print("refused", path, exc.strerror)
elif attack == "deep_tree":
    for _ in range(int(args[0])):
        os.mkdir("d")
        os.chdir("d")
    print("made", flush=True)
    time.sleep(60)
elif attack == "many_files":
    n = 0
    while True:
        open(f"f{n}", "w").close()
        n += 1
elif attack == "shared_memory":
    where, megabytes = args[0], int(args[1])
    size = megabytes << 20
    try:
        if where == "anonymous":
            region = mmap.mmap(-1, size, flags=mmap.MAP_SHARED)
            for i in range(0, size, 4096):
                region[i] = 1
        else:
            with open(os.path.join(where, "fill"), "wb") as f:
                block = b"x" * (1 << 20)
                for _ in range(megabytes):
                    f.write(block)
        print("wrote", where, megabytes, flush=True)
    except OSError as exc:
        print("refused", where, exc.strerror, flush=True)
    time.sleep(0.5)
elif attack == "cpu_relay":
    # Children that burn CPU one after another: none passes a per-process limit alone.
    for _ in range(int(args[0])):
        subprocess.run(
            [
                sys.executable,
                "-c",
                "import time\nt=time.process_time()\nwhile time.process_time()-t<0.6: pass",
            ]
        )
    print("burned", flush=True)
elif attack == "connections":
    port = int(BASE.split(":")[2].split("/")[0])
    held = []
    for _ in range(int(args[0])):
        try:
            held.append(socket.create_connection(("127.0.0.1", port), timeout=5))
        except OSError:
            break
    # Each a call the upstream answers slowly.
    body = json.dumps({"model": "policy", "messages": [{"role": "user", "content": "slow"}]})
    path = BASE.split(str(port), 1)[1] + "/chat/completions"
    for s in held:
        s.sendall(
            f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n{body}".encode()
        )
    answered = {}
    for s in held:
        s.settimeout(10)
        try:
            status = s.recv(64).split(b" ")[1].decode()
        except (OSError, IndexError):
            status = "closed"
        answered[status] = answered.get(status, 0) + 1
    print("opened", len(held), json.dumps(answered, sort_keys=True))
    for s in held:
        s.close()
    time.sleep(0.2)  # the relay sees them closed
    many = {"model": "policy", "n": 64, "messages": [{"role": "user", "content": "2+2"}]}
    print("n", call(f"{BASE}/chat/completions", many))
elif attack == "daemons":
    marker = args[0]
    # nohup, a double fork and a new session: none may outlive the rollout.
    subprocess.Popen(
        ["nohup", "sleep", "600", marker], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            os.execvp("sleep", ["sleep", "600", marker])
        os._exit(0)
    print("left", flush=True)
else:
    raise SystemExit(f"unknown attack {attack!r}")
