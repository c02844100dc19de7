"""Set a command agent's resource limits, then become the command (``exec``).

Run by path with ``python -I -S`` (the standard library only, nothing of fulmen imported) as
the first program of a sandboxed command: limits set here hold for everything it starts,
sandbox included. Setting them in the runner before ``exec`` would need ``preexec_fn``, which
is unsafe in a process with threads (the runner has several).

    python -I -S launcher.py --limit data=4294967296 --limit nproc=256 -- PROGRAM ARGS...
"""

import os
import resource
import signal
import sys

__all__ = ["main"]

_LIMITS = {
    "data": resource.RLIMIT_DATA,
    "cpu": resource.RLIMIT_CPU,
    "nproc": resource.RLIMIT_NPROC,
    "fsize": resource.RLIMIT_FSIZE,
    "core": resource.RLIMIT_CORE,
}


def main(argv: list[str]) -> None:
    """Apply every ``--limit name=value`` (soft and hard), then exec the rest."""
    split = argv.index("--")
    options, command = argv[:split], argv[split + 1 :]
    for index in range(0, len(options), 2):
        if options[index] != "--limit":
            raise SystemExit(f"launcher: unknown option {options[index]!r}")
        name, _, value = options[index + 1].partition("=")
        # CPU: SIGXCPU at the soft limit (reported as cpu_limit), SIGKILL one second later.
        hard = int(value) + 1 if name == "cpu" else int(value)
        resource.setrlimit(_LIMITS[name], (int(value), hard))
    # Python ignores these two; an ignored signal stays ignored across exec.
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
    try:
        os.execvp(command[0], command)
    except OSError as exc:
        # The shell's convention: 127 for a program that is not there, 126 for one that cannot run.
        print(f"fulmen: cannot run {command[0]!r}: {exc.strerror}", file=sys.stderr, flush=True)
        os._exit(127 if isinstance(exc, FileNotFoundError) else 126)


if __name__ == "__main__":
    main(sys.argv[1:])
