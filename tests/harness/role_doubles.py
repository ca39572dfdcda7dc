"""TEST DOUBLES: worker roles that fail the way real engines do, on demand (no real engine can be
made to raise one chosen error at will). Run by tests/harness/launchers/mocker_topology.sh.

    role_doubles.py raises MESSAGE         a Python traceback ending RuntimeError(MESSAGE)
    role_doubles.py crash-handler MESSAGE  a child process (its "scheduler") logs a traceback
                                           ending RuntimeError(MESSAGE) as SGLang's scheduler
                                           does, then kills the whole process tree with SIGKILL
                                           (SGLang's kill_process_tree): the worker, then
                                           itself
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import time
import traceback


def prepare_for_extend(message: str) -> None:
    raise RuntimeError(message)


def scheduler(message: str) -> None:
    time.sleep(0.5)  # the worker logs its own lines meanwhile, as a starting engine does
    try:
        prepare_for_extend(message)
    except RuntimeError:
        print(
            f"[{time.strftime('%Y-%m-%d %H:%M:%S')} TP0] Scheduler hit an exception: "
            f"{traceback.format_exc()}",
            flush=True,
        )
        os.kill(os.getppid(), signal.SIGKILL)  # the worker, then itself, as kill_process_tree
        os.kill(os.getpid(), signal.SIGKILL)


def main() -> None:
    kind, message = sys.argv[1], sys.argv[2]
    if kind == "raises":
        time.sleep(0.5)
        prepare_for_extend(message)
    child = multiprocessing.get_context("fork").Process(target=scheduler, args=(message,))
    child.start()
    while True:
        print("worker: waiting for the scheduler", flush=True)
        time.sleep(0.2)


if __name__ == "__main__":
    main()
