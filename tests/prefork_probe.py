"""What a process of ``tests/prefork.py`` sees, for ``tests/test_prefork.py``.

``report CODE``: print what it was given as JSON (arguments, directory, a variable, standard
input, its parent), write a line to standard error, exit with CODE. ``wait``: print its pid,
then sleep; SIGTERM makes it exit with 3.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time


def main() -> None:
    """Run the mode ``sys.argv[1]`` names."""
    if sys.argv[1] == "report":
        seen = {
            "argv": sys.argv[1:],
            "cwd": os.getcwd(),
            "probe": os.environ.get("PROBE"),
            "path0": sys.path[0],
            "stdin": sys.stdin.read(),
            "pid": os.getpid(),
            "ppid": os.getppid(),
            "name": __name__,
        }
        print(json.dumps(seen))
        print("to stderr", file=sys.stderr)
        sys.exit(int(sys.argv[2]))
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(3))
    print(os.getpid(), flush=True)
    time.sleep(60)


if __name__ == "__main__":
    main()
