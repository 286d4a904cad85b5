"""What a rank runs: a script file (``python script.py``) or an installed module
(``python -m package.module``, a framework's own entry point such as ``torchtitan.train``),
in a working folder, set up the way the interpreter sets up each before running it."""

import os
import runpy
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class Program:
    """Exactly one of ``script`` (a file) and ``module`` (an importable dotted name)."""

    script: Path | None = None
    module: str | None = None
    workdir: Path | None = None
    """The folder the rank runs in (relative paths in the program's arguments and config files
    resolve against it); ``None``: the launching process's, as torchrun does."""

    def __post_init__(self) -> None:
        if (self.script is None) == (self.module is None):
            raise ValueError("a program is a script or a module, exactly one of them")

    @classmethod
    def of(cls, target: "str | Path | Program") -> "Program":
        """``target`` as a program: a path means a script."""
        return target if isinstance(target, Program) else cls(script=Path(target))

    def check(self) -> "Program":
        """The same program with absolute paths; raises FileNotFoundError naming what is
        missing (a rank would only fail later, in its log)."""
        if self.script is not None and not self.script.is_file():
            raise FileNotFoundError(f"training script {self.script} does not exist")
        if self.workdir is not None and not self.workdir.is_dir():
            raise FileNotFoundError(f"working folder {self.workdir} does not exist")
        return Program(script=None if self.script is None else self.script.resolve(),
                       module=self.module,
                       workdir=None if self.workdir is None else self.workdir.resolve())

    def enter(self, args: Sequence[str]) -> None:
        """Working folder, ``sys.argv`` and ``sys.path[0]`` as ``python script.py args`` or
        ``python -m module args`` leave them (the fork server ran with ``-c``: ``""``)."""
        if self.workdir is not None:
            os.chdir(self.workdir)
        if self.script is not None:
            sys.argv = [str(self.script), *args]
            sys.path[0] = str(self.script.parent)
        else:
            sys.argv = [str(self.module), *args]  # runpy puts the module's file in argv[0]
            sys.path[0] = os.getcwd()

    def run(self) -> None:
        """Run it as ``__main__``."""
        if self.script is not None:
            runpy.run_path(str(self.script), run_name="__main__")
        else:
            runpy.run_module(str(self.module), run_name="__main__", alter_sys=True)
