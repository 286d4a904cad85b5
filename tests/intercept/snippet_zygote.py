"""The process that device snippets (``device_harness.run_snippet``) fork from: it loads the
fake-CUDA shim and imports torch once, then forks one fresh child per snippet, which runs it as
``python -c`` would. A snippet in its own interpreter paid those imports each time (~2 s of CPU).

Requests come as JSON lines on stdin (``code`` and the files for the child's ``stdout`` and
``stderr``); for each, the child's ``{"pid": ...}`` and then its ``{"exit": status}`` go out as
JSON lines on stdout. It exits when stdin closes (the test session is over).
"""

import gc
import json
import os
import sys
import traceback
import types
from typing import Any


def main() -> None:
    gc.disable()  # nothing to collect while torch is imported (intercept.dispatch.device)
    from intercept.process import shim
    shim.load()
    import torch._dynamo  # noqa: F401 - after the shim; FakeTensorMode imports it at first use

    from intercept.dispatch import patches  # noqa: F401 - each child installs its own
    gc.freeze()
    gc.enable()
    for line in sys.stdin:
        request = json.loads(line)
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:
            _run(request)
        _answer({"pid": pid})
        _, status = os.waitpid(pid, 0)
        _answer({"exit": os.waitstatus_to_exitcode(status)})


def _answer(message: dict[str, int]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def _run(request: dict[str, Any]) -> None:
    """In the forked child: the snippet's output to its files, its code as ``__main__`` of a
    ``python -c``; never returns."""
    for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
        target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(target, fd)
        os.close(target)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    sys.argv = ["-c"]
    main_module = sys.modules["__main__"] = types.ModuleType("__main__")
    status = 0
    try:
        exec(compile(request["code"], "<string>", "exec"), main_module.__dict__)
    except SystemExit as exit_:
        status = exit_.code if isinstance(exit_.code, int) else int(exit_.code is not None)
    except BaseException:  # noqa: BLE001 - reported as python -c reports it
        traceback.print_exc()
        status = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


if __name__ == "__main__":
    main()
