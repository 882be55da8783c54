"""``python -m steadyrl.sandbox.worker SOCK_FD SHARED_FD TRAINER_PID``: a *fresh* sandbox keeper.

The trainer starts this program (exec, never fork) for a target given as a
:class:`~steadyrl.sandbox.Rebuild`, with an environment that holds no credentials. It reads one
pickled frame from the socket - the target's recipe, the limits, the tag, the trainer's
``sys.path`` - and becomes the keeper (:func:`steadyrl.sandbox.child.keeper_main`); its runner
rebuilds the target from the recipe. Nothing of the trainer's memory is in this process: the
only secrets here are the ones its own recipe carries (its own reward's API key).

The trainer is the trusted side: the frame is a pickle it wrote. Only the standard library and
``steadyrl.sandbox`` are imported before the recipe is rebuilt.
"""

from __future__ import annotations

import os
import pickle
import socket
import sys


def main(argv: list[str]) -> None:
    sock_fd, shared_fd, trainer = (int(x) for x in argv[:3])
    from .child import Shared, keeper_main
    from .frames import recv_request

    sock = socket.socket(fileno=sock_fd)
    try:
        boot = recv_request(sock)
    except (OSError, EOFError, pickle.UnpicklingError):
        os._exit(1)
    shared = Shared(boot["limits"].output_kib * 1024, fd=shared_fd)
    keeper_main(None, sock, shared, boot["limits"], boot["passthrough"], boot["tag"], trainer,
                recipe={"target": boot["target"], "sys_path": boot["sys_path"]})


if __name__ == "__main__":
    main(sys.argv[1:])
