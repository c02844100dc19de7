"""Commands that misbehave, one per argument, to show the sandbox holds (standard library only)."""

import os
import signal
import socket
import sys
import time

what = sys.argv[1]
if what == "fork_bomb":
    children = 0
    while True:
        try:
            if os.fork() == 0:
                time.sleep(60)
                os._exit(0)
            children += 1
        except OSError:
            print(f"fork refused after {children} children", flush=True)
            time.sleep(60)
elif what == "endless_output":
    line = b"x" * 1023 + b"\n"
    while True:
        sys.stdout.buffer.write(line)
elif what == "disk_fill":
    block = b"\0" * (1 << 20)
    for n in range(10_000):
        with open(f"fill-{n}", "wb") as f:  # many files: each under the file-size limit
            for _ in range(4):
                f.write(block)
elif what == "ignore_term":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if os.fork() == 0:  # a child that leaves the process group too
        os.setsid()
        time.sleep(600)
        os._exit(0)
    time.sleep(600)
elif what == "connect":
    host, port = sys.argv[2], int(sys.argv[3])
    try:
        socket.create_connection((host, port), timeout=3).close()
        print("connected")
    except OSError as exc:
        print(f"refused: {exc}")
elif what == "read":
    try:
        with open(sys.argv[2]) as f:
            print("read:", f.read())
    except OSError as exc:
        print(f"cannot read: {exc}")
elif what == "write":
    try:
        with open(sys.argv[2], "w") as f:
            f.write("x")
        print("wrote")
    except OSError as exc:
        print(f"cannot write: {exc}")
elif what == "big_file":  # through a program that does not ignore SIGXFSZ as Python does
    signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
    os.execvp("sh", ["sh", "-c", "head -c 100000000 /dev/zero > big"])
elif what == "cpu":
    while True:
        pass
