"""Build and load the fake-CUDA shim (``native/fakecuda.cpp``) before torch is imported.

torch looks up its CUDA hooks exactly once, while ``import torch`` runs; a CPU build finds none
and the accelerator stays "none" for the life of the process. The shim registers hooks that say
"CUDA is built" plus a CUDA device guard, so it must be in the process (loaded ``RTLD_GLOBAL``)
before the first ``import torch``.

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
import tempfile
from collections.abc import Callable
from enum import IntEnum
from pathlib import Path

from phantora.errors import MissingDependencyError, SimulationError

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

_SET_REQUIRES_DEVICE_INIT = "_ZN5torch5utils24set_requires_device_initEN3c1010DeviceTypeEb"
"""``torch::utils::set_requires_device_init(c10::DeviceType, bool)``, mangled."""
CUDA_DEVICE_TYPE = 1
"""``c10::DeviceType::CUDA`` (also what the ``torch.Stream`` constructor takes)."""

_library: ctypes.CDLL | None = None
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
    global _library
    if _library is not None:
        return _library
    if "torch" in sys.modules:
        raise SimulationError(
            "the fake-CUDA shim must be loaded before `import torch` (torch reads its CUDA hooks "
            "once, at import); call intercept.device.prepare() before anything imports torch"
        )
    path = build()
    library = ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
    _declare(library)
    _library = library
    return library


def library() -> ctypes.CDLL:
    """The loaded shim; :func:`load` must have run."""
    if _library is None:
        raise SimulationError("the fake-CUDA shim is not loaded; call intercept.shim.load() first")
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
