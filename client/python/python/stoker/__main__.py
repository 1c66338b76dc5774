"""The ``stoker`` command (worker, stream, pack, synth, bench, demo, doctor,
health, augment), the same as the ``stoker`` binary, from the Rust code the
package's extension already links: ``python -m stoker ...``, or ``stoker
...`` once the package is installed. SIGINT gets its default back, so the
command's own handlers see Ctrl-C."""

import signal
import sys


def main() -> None:
    # The command handles its own signals as the binary does: Ctrl-C ends
    # it (a worker drains first), instead of waiting in Python's handler
    # for a return that a long-running command never makes.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    from ._stoker import main as run

    # Local workers (`stream --workers local`) are this command again.
    code = run(["stoker", *sys.argv[1:]], [sys.executable, "-m", "stoker"])
    sys.exit(code)


if __name__ == "__main__":
    main()
