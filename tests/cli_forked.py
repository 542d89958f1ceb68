"""Stand-in for one ``python -m MODULE ARGS...`` forked by ``tests/cli_forkserver.py``:
``python -S -E tests/cli_forked.py SOCKET -m MODULE ARGS...`` hands over the module, its arguments,
environment, folder, umask and standard streams, passes on the signals it gets, and exits as the process
did (one ended by a signal ends this process with the same signal). Standard library only, and started
without ``site``: it costs a few milliseconds, not the module's imports.
"""

import json
import os
import signal
import socket
import sys

FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)


def main() -> None:
    path, flag, module, argv = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
    if flag != "-m":
        sys.stderr.write("cli_forked: only `-m MODULE ARGS...` runs here\n")
        os._exit(2)
    umask = os.umask(0)
    os.umask(umask)
    request = {"module": module, "argv": argv, "env": dict(os.environ), "cwd": os.getcwd(), "umask": umask}
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    connection.connect(path)
    pid = 0
    early: list[int] = []

    def forward(number: int, _frame: object) -> None:
        if not pid:
            early.append(number)
            return
        try:
            os.kill(pid, number)
        except ProcessLookupError:
            pass  # it has just ended: its exit status is on its way

    for number in FORWARDED:
        signal.signal(number, forward)
    socket.send_fds(connection, [json.dumps(request).encode()], [0, 1, 2])
    while True:
        answer = connection.recv(64).decode()
        if not answer:
            sys.stderr.write("cli_forked: the fork server went away\n")
            os._exit(1)
        word, _, value = answer.partition(" ")
        if word == "pid":
            pid = int(value)
            for waiting in early:
                os.kill(pid, waiting)
        elif word == "exit":
            status = int(value)
            if os.WIFSIGNALED(status):
                ended_by = os.WTERMSIG(status)
                if ended_by not in (signal.SIGKILL, signal.SIGSTOP):  # whose handling cannot be set
                    signal.signal(ended_by, signal.SIG_DFL)
                os.kill(os.getpid(), ended_by)
            os._exit(os.waitstatus_to_exitcode(status))


if __name__ == "__main__":
    main()
