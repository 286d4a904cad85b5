"""Build and load the fake-CUDA shim (``native/fakecuda.cpp``) before torch is imported.

torch looks up its CUDA hooks exactly once, while ``import torch`` runs; a CPU build finds none
and the accelerator stays "none" for the life of the process. The shim registers hooks that say
"CUDA is built" plus a CUDA device guard, so it must be in the process (loaded ``RTLD_GLOBAL``)
before the first ``import torch``.

The shim also keeps the process's account of *excluded* CPU time, the simulator's own (see
``intercept.host_time.clock``): sections Python opens (:class:`NativeExclusion`), every call torch's
C++ makes into Python (:func:`exclude_interpreter_callbacks`: ``__torch_dispatch__``,
``prim.device`` queries of FakeTensors) and every call of the stream/event callback, plus measured
:class:`Deductions` for what no section covers. One account serves Python and C++, so sections
nest correctly across the two.

The library is compiled with ``g++`` at first use against the headers shipped in the installed
torch wheel and cached under ``~/.cache/phantora-ns3/fakecuda/<key>/`` where the key hashes the
source, the torch version and its location; a file lock keeps concurrent processes (a fork
server and a test run, say) from building it twice at once.
"""

import ctypes
import fcntl
import hashlib
import importlib.metadata
import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from enum import IntEnum
from pathlib import Path
from types import CodeType, TracebackType
from typing import NamedTuple

from hwmodel.errors import MissingDependencyError, SimulationError

SOURCE = Path(__file__).with_name("native") / "fakecuda.cpp"
LIBRARY_NAME = "libfakecuda.so"


class CallbackOp(IntEnum):
    """What the shim asks of the Python callback (mirrors ``CallbackOp`` in fakecuda.cpp)."""

    NEW_EVENT = 0
    RECORD_EVENT = 1
    WAIT_EVENT = 2
    SYNC_DEVICE = 3
    SYNC_STREAM = 4
    SYNC_EVENT = 5
    QUERY_EVENT = 6
    QUERY_STREAM = 7


CALLBACK_TYPE = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_int, ctypes.c_int64, ctypes.c_int64)
"""``int64_t callback(int op, int64_t a, int64_t b)``; a negative result reports a failure."""

SECTION_MEASURE_ROUNDS = 20
SECTION_MEASURE_SECTIONS = 1000
""":func:`measure_section_deduction` times this many rounds of this many sections (~10 ms)."""

_SET_REQUIRES_DEVICE_INIT = "_ZN5torch5utils24set_requires_device_initEN3c1010DeviceTypeEb"
"""``torch::utils::set_requires_device_init(c10::DeviceType, bool)``, mangled."""
CUDA_DEVICE_TYPE = 1
"""``c10::DeviceType::CUDA`` (also what the ``torch.Stream`` constructor takes)."""

_library: ctypes.CDLL | None = None
_holding_gil: ctypes.PyDLL | None = None
"""The same library, for the tiny hot functions: calls through a PyDLL keep the GIL (a CDLL
call releases and re-takes it, which costs more than the function)."""
_exclusion: "NativeExclusion | None" = None
_callback: "ctypes._CFunctionType | None" = None  # keeps the installed callback alive


def cache_root() -> Path:
    """Where built shims live (``$XDG_CACHE_HOME`` or ``~/.cache``, then ``phantora-ns3``)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "phantora-ns3" / "fakecuda"


def load() -> ctypes.CDLL:
    """Build the shim if needed and load it into the process; idempotent.

    Raises :class:`SimulationError` if torch was imported first (the shim would have no
    effect) and :class:`MissingDependencyError` if torch or a C++ compiler is missing.
    """
    global _library, _holding_gil, _exclusion
    if _library is not None:
        return _library
    if "torch" in sys.modules:
        raise SimulationError(
            "the fake-CUDA shim must be loaded before `import torch` (torch reads its CUDA hooks "
            "once, at import); call intercept.dispatch.device.prepare() before anything imports "
            "torch"
        )
    path = build()
    library = ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
    _declare(library)
    _holding_gil = ctypes.PyDLL(str(path), mode=ctypes.RTLD_GLOBAL)
    _declare_exclusion(_holding_gil)
    _exclusion = NativeExclusion(_holding_gil)
    _library = library
    return library


def library() -> ctypes.CDLL:
    """The loaded shim; :func:`load` must have run."""
    if _library is None:
        raise SimulationError("the fake-CUDA shim is not loaded; call "
                              "intercept.process.shim.load() first")
    return _library


def set_callback(function: Callable[[int, int, int], int] | None) -> None:
    """Install ``function(op, a, b) -> int`` (see :class:`CallbackOp`) or remove it (``None``).

    Without a callback the shim completes events at once and returns from syncs immediately.
    """
    global _callback
    _callback = None if function is None else CALLBACK_TYPE(function)
    library().fakecuda_set_callback(_callback)


def elapsed_ms(start_event_id: int, end_event_id: int) -> float:
    """Milliseconds between two recorded CUDA events (``torch.Event.event_id`` values)."""
    ms = ctypes.c_double()
    error = ctypes.create_string_buffer(512)
    if library().fakecuda_elapsed_time(start_event_id, end_event_id, ctypes.byref(ms), error,
                                       len(error)) != 0:
        raise RuntimeError(error.value.decode(errors="replace"))
    return ms.value


def mark_cuda_initialized() -> None:
    """Tell torch's C++ side that CUDA's lazy initialisation has run (it never runs for real:
    ``torch.cuda._lazy_init`` is patched away), or ``torch.accelerator.synchronize()`` silently
    does nothing. The setter is exported by libtorch_python but not bound in Python."""
    python_lib = ctypes.CDLL(str(_torch_dir() / "lib" / "libtorch_python.so"))
    set_requires_device_init = python_lib[_SET_REQUIRES_DEVICE_INIT]
    set_requires_device_init.argtypes = [ctypes.c_int8, ctypes.c_bool]
    set_requires_device_init.restype = None
    set_requires_device_init(CUDA_DEVICE_TYPE, False)


def exclude_interpreter_callbacks() -> None:
    """From now on every call torch's C++ makes into Python (``__torch_dispatch__``, metadata
    queries of Python tensor subclasses, ...) runs in an excluded section; call after
    ``import torch``, once per process (idempotent)."""
    library().fakecuda_exclude_interpreter_callbacks()


class NativeExclusion:
    """The shim's account of excluded CPU time, as a reusable, nestable context manager.

    One per process: every thread's sections, Python's and C++'s, are in the same account. The
    calling thread's CPU time inside counts as excluded; :meth:`total_ns` sums all threads.

    Only the simulator's code enters it, so the function whose ``with`` opens an outermost
    section is the simulator's (a stand-in: ``time.perf_counter``'s, ``torch.cuda.synchronize``'s,
    a c10d wrapper's): the Python work counted on the thread since that function was called, its
    own lines and what it called on the way in, is given back (:func:`work_counts`). A real host
    runs a C call there, or a call whose whole host cost a table charges.
    """

    __slots__ = ("_enter", "_exit", "total_ns")

    def __init__(self, holding_gil: ctypes.PyDLL) -> None:
        self._enter = holding_gil.fakecuda_exclusion_enter_for_caller
        self._exit = holding_gil.fakecuda_exclusion_exit
        self.total_ns: Callable[[], int] = holding_gil.fakecuda_excluded_ns
        """Excluded CPU time of all threads so far (open sections up to now), in ns."""

    def __enter__(self) -> None:
        self._enter()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._exit()


def native_exclusion() -> NativeExclusion | None:
    """The shim's excluded-CPU account, or ``None`` where the shim is not loaded."""
    return _exclusion


def simulator_time() -> AbstractContextManager[None]:
    """A context manager: the calling thread's CPU time inside is the simulator's (an excluded
    section of the shim's account; nothing where the shim is not loaded)."""
    return _exclusion or _NOTHING


_NOTHING = nullcontext()


@contextmanager
def script_time() -> Iterator[None]:
    """CPU time the calling thread spends inside is the script's, even within excluded sections
    (real CPU work a simulator callback runs on the script's behalf)."""
    lib = _gil_library()
    depth = lib.fakecuda_exclusion_suspend()
    try:
        yield
    finally:
        lib.fakecuda_exclusion_resume(depth)


def count_rest_of_dispatch() -> None:
    """The rest of the innermost call from torch's C++ into ``__torch_dispatch__`` on the
    calling thread is the script's CPU time (the fake mode deferred the op to a tensor subclass
    such as DTensor, whose dispatch a real GPU host runs too)."""
    _gil_library().fakecuda_count_rest_of_dispatch()


def thread_counted_ns() -> int:
    """The calling thread's CPU time that counts as the script's (excluded sections and
    deductions taken off), in ns; for measuring the deductions and for tests."""
    return int(_gil_library().fakecuda_thread_counted_ns())


class WorkCounts(NamedTuple):
    """The script's Python work counted so far on counted threads, outside excluded sections
    (:func:`count_thread`): what a real host runs too, in units that do not depend on this
    machine's speed or load. Work inside a hot walk (:func:`set_hot_code`) is counted apart."""

    lines: int
    """Source lines started (each loop iteration starts its lines again), outside hot walks."""
    calls: int
    """Python functions entered (generators resumed included), outside hot walks."""
    hot_lines: int = 0
    """Lines started while a hot walk's frame was on the thread's stack."""
    hot_calls: int = 0
    """Functions entered (or resumed) while a hot walk's frame was on the thread's stack."""


def set_hot_code(codes: tuple[CodeType, ...]) -> None:
    """Count what runs while a frame of one of ``codes`` is on a counted thread's stack (call to
    return, a generator's every resume to its yield) as hot work (:class:`WorkCounts`),
    replacing the codes set before. The caller keeps ``codes`` alive."""
    if _gil_library().fakecuda_set_hot_code(tuple(codes)) != 0:
        raise TypeError(f"hot walks are code objects, got {codes!r}")


def count_thread() -> bool:
    """Count the calling thread's Python work from now on (:func:`work_counts`). It takes the
    thread's trace function (``sys.settrace``): returns ``False`` where another one was set
    (a debugger, a coverage tool), which no longer runs."""
    return _gil_library().fakecuda_count_thread() == 0


def thread_counted() -> bool:
    """Whether the calling thread's Python work is being counted (nothing has replaced the
    counter with a trace function of its own since :func:`count_thread`)."""
    return bool(_gil_library().fakecuda_thread_counted())


def work_counts() -> WorkCounts:
    """The script's Python work counted so far, all threads (see :class:`WorkCounts`)."""
    out = (ctypes.c_int64 * 4)()
    _gil_library().fakecuda_work_counts(out)
    return WorkCounts(*out)


class Deductions(NamedTuple):
    """CPU time the shim takes off the script's between excluded sections (see fakecuda.cpp):
    what no section can cover, as measured. Each is at most the CPU time the thread spent
    counted since the previous deduction of its kind."""

    section_ns: int
    """Per outermost section: what timing a section costs outside it (two clock reads)."""
    dispatch_ns: int
    """Per outermost op dispatch into Python: the C++ glue around the call."""


def set_deductions(deductions: Deductions) -> None:
    """Put ``deductions`` in force for every thread."""
    if min(deductions) < 0:
        raise ValueError(f"deductions are >= 0 ns, got {deductions}")
    library().fakecuda_set_deductions(*deductions)


def deductions() -> Deductions:
    """The deductions in force (zero until :func:`set_deductions`)."""
    out = (ctypes.c_int64 * 2)()
    library().fakecuda_deductions(out)
    return Deductions(out[0], out[1])


def measure_section_deduction(rounds: int = SECTION_MEASURE_ROUNDS,
                              sections: int = SECTION_MEASURE_SECTIONS) -> int:
    """CPU ns an empty excluded section costs the calling thread outside it: the smallest
    per-section mean over ``rounds`` of ``sections`` (contention only ever adds). Needs no
    section deduction in force."""
    if deductions().section_ns:
        raise SimulationError("measure the section deduction while none is in force")
    count = _gil_library().fakecuda_count_empty_sections
    return max(0, min(count(sections) for _ in range(rounds)) // sections)


def _gil_library() -> ctypes.PyDLL:
    if _holding_gil is None:
        raise SimulationError("the fake-CUDA shim is not loaded; call "
                              "intercept.process.shim.load() first")
    return _holding_gil


def build() -> Path:
    """Path of the compiled shim for the installed torch, compiling it first if needed."""
    torch_dir = _torch_dir()
    source = SOURCE.read_bytes()
    flags = _flags(torch_dir)
    key_parts = [source, _torch_version().encode(), str(torch_dir).encode(),
                 " ".join(flags[0] + flags[1]).encode()]
    key = hashlib.sha256(b"\0".join(key_parts)).hexdigest()[:20]
    folder = cache_root() / f"torch-{_torch_version()}-{key}"
    target = folder / LIBRARY_NAME
    if target.exists():
        return target
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not target.exists():  # another process may have built it while we waited
            _compile(flags, folder, target)
    return target


def _compile(flags: tuple[list[str], list[str]], folder: Path, target: Path) -> None:
    """Compile into a temporary file, then rename it into place (readers never see half a file)."""
    compiler = os.environ.get("CXX", "g++")
    if shutil.which(compiler) is None:
        raise MissingDependencyError(
            f"the fake-CUDA shim needs a C++ compiler and {compiler!r} was not found; install one "
            "(e.g. `apt-get install g++`) or point $CXX at it"
        )
    fd, partial = tempfile.mkstemp(prefix=".build-", suffix=".so", dir=folder)
    os.close(fd)
    compile_flags, link_flags = flags
    # Libraries after the source: with --as-needed (Debian's default) earlier ones are dropped.
    command = [compiler, *compile_flags, str(SOURCE), *link_flags, "-o", partial]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        os.unlink(partial)
        raise SimulationError(
            f"building the fake-CUDA shim failed ({' '.join(command)}):\n{result.stderr[-4000:]}"
        )
    os.replace(partial, target)


def _flags(torch_dir: Path) -> tuple[list[str], list[str]]:
    """Compiler flags and linker flags for the installed torch."""
    lib = torch_dir / "lib"
    compile_flags = ["-O2", "-std=c++20", "-shared", "-fPIC", "-w",
                     f"-D_GLIBCXX_USE_CXX11_ABI={_cxx11_abi(lib / 'libc10.so')}",
                     f"-I{sysconfig.get_paths()['include']}",
                     f"-I{torch_dir / 'include'}",
                     f"-I{torch_dir / 'include' / 'torch' / 'csrc' / 'api' / 'include'}"]
    link_flags = [f"-L{lib}", "-lc10", "-ltorch_cpu", f"-Wl,-rpath,{lib}"]
    return compile_flags, link_flags


def _cxx11_abi(libc10: Path) -> int:
    """1 if torch was built with the C++11 string ABI (its symbols then mention ``__cxx11``)."""
    return int(b"__cxx11" in libc10.read_bytes())


def _torch_dir() -> Path:
    spec = importlib.util.find_spec("torch")
    if spec is None or spec.origin is None:
        raise MissingDependencyError(
            "live simulation needs torch; install it with `pip install 'phantora-ns3[torch]'`"
        )
    return Path(spec.origin).parent


def _torch_version() -> str:
    return importlib.metadata.version("torch")


def _declare(library: ctypes.CDLL) -> None:
    """Argument and result types of the shim's C functions (ctypes defaults to int otherwise)."""
    library.fakecuda_set_device_count.argtypes = [ctypes.c_int]
    library.fakecuda_set_device_count.restype = None
    library.fakecuda_set_callback.argtypes = [CALLBACK_TYPE]
    library.fakecuda_set_callback.restype = None
    library.fakecuda_set_device.argtypes = [ctypes.c_int]
    library.fakecuda_set_device.restype = ctypes.c_int
    library.fakecuda_current_device.argtypes = []
    library.fakecuda_current_device.restype = ctypes.c_int
    library.fakecuda_current_stream.argtypes = [ctypes.c_int]
    library.fakecuda_current_stream.restype = ctypes.c_int64
    library.fakecuda_elapsed_time.argtypes = [ctypes.c_int64, ctypes.c_int64,
                                              ctypes.POINTER(ctypes.c_double), ctypes.c_char_p,
                                              ctypes.c_int]
    library.fakecuda_elapsed_time.restype = ctypes.c_int
    library.fakecuda_accelerator_is_cuda.argtypes = []
    library.fakecuda_accelerator_is_cuda.restype = ctypes.c_int
    library.fakecuda_exclude_interpreter_callbacks.argtypes = []
    library.fakecuda_exclude_interpreter_callbacks.restype = None
    library.fakecuda_set_deductions.argtypes = [ctypes.c_int64, ctypes.c_int64]
    library.fakecuda_set_deductions.restype = None
    library.fakecuda_deductions.argtypes = [ctypes.POINTER(ctypes.c_int64)]
    library.fakecuda_deductions.restype = None


def _declare_exclusion(library: ctypes.PyDLL) -> None:
    """The excluded-CPU account's functions, called through a PyDLL (with the GIL held)."""
    library.fakecuda_exclusion_enter.argtypes = []
    library.fakecuda_exclusion_enter.restype = None
    library.fakecuda_exclusion_enter_for_caller.argtypes = []
    library.fakecuda_exclusion_enter_for_caller.restype = None
    library.fakecuda_exclusion_exit.argtypes = []
    library.fakecuda_exclusion_exit.restype = None
    library.fakecuda_exclusion_suspend.argtypes = []
    library.fakecuda_exclusion_suspend.restype = ctypes.c_int
    library.fakecuda_exclusion_resume.argtypes = [ctypes.c_int]
    library.fakecuda_exclusion_resume.restype = None
    library.fakecuda_count_rest_of_dispatch.argtypes = []
    library.fakecuda_count_rest_of_dispatch.restype = None
    library.fakecuda_excluded_ns.argtypes = []
    library.fakecuda_excluded_ns.restype = ctypes.c_int64
    library.fakecuda_thread_counted_ns.argtypes = []
    library.fakecuda_thread_counted_ns.restype = ctypes.c_int64
    library.fakecuda_count_empty_sections.argtypes = [ctypes.c_int]
    library.fakecuda_count_empty_sections.restype = ctypes.c_int64
    library.fakecuda_count_thread.argtypes = []
    library.fakecuda_count_thread.restype = ctypes.c_int
    library.fakecuda_thread_counted.argtypes = []
    library.fakecuda_thread_counted.restype = ctypes.c_int
    library.fakecuda_work_counts.argtypes = [ctypes.POINTER(ctypes.c_int64)]
    library.fakecuda_work_counts.restype = None
    library.fakecuda_set_hot_code.argtypes = [ctypes.py_object]
    library.fakecuda_set_hot_code.restype = ctypes.c_int
