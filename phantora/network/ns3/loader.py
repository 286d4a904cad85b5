"""Loads ns-3 and our C++ models into this process, once.

The ``ns3`` wheel's own ``from ns import ns`` parses every module header (~7 s, ~650 MB) and
parses them *before* loading the libraries, which makes Cling print "Failed to materialize
symbols". Here the five libraries we need are loaded first, then only their module headers
(~1.4 s CPU together) and our headers from :data:`ns3_models.HEADER_DIR` (~0.6 s). Cling
compiles our classes on first use: about 1 s more for the first fabric and 1.4 s for the
first connection, once per process. cppyy is touched nowhere else in phantora.
"""

import importlib.util
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from ns3_models import HEADER_DIR
from hwmodel.errors import MissingDependencyError

NS3_VERSION = "3.44"
NS3_MODULES = ("core", "network", "traffic-control", "internet", "point-to-point")
"""ns-3 modules the backend uses, in dependency order."""

OUR_HEADERS = (
    "helper/fabric-helper.h",
    "helper/message-helper.h",
    "helper/roce-fabric-helper.h",
    "helper/simulation-stepper.h",
)
"""Top-level headers of ``ns3_models``; they include the rest."""

INSTALL_HINT = "pip install 'ns3==3.44.post0'"

_loaded: SimpleNamespace | None = None


def load() -> SimpleNamespace:
    """Return ``SimpleNamespace(ns3=cppyy.gbl.ns3, phantora=cppyy.gbl.phantora, std=...)``.

    The first call loads everything (about 1.3 s); later calls return the same object.
    Raises :class:`MissingDependencyError` when ns-3 or cppyy is not installed.
    """
    global _loaded
    if _loaded is None:
        _loaded = _load()
    return _loaded


def _load() -> SimpleNamespace:
    spec = importlib.util.find_spec("ns3")
    if spec is None or not spec.submodule_search_locations:
        raise MissingDependencyError(
            f"the packet-level network backend needs ns-3 {NS3_VERSION}; install it with "
            f"{INSTALL_HINT}")
    try:
        import cppyy  # type: ignore[import-untyped]
        import libcppyy  # type: ignore[import-not-found]
    except ImportError as exc:
        raise MissingDependencyError(
            f"the packet-level network backend needs cppyy (it comes with the ns3 wheel); "
            f"reinstall with {INSTALL_HINT}") from exc
    root = Path(next(iter(spec.submodule_search_locations)))
    libdir = root / "lib64"
    libcppyy.AddSmartPtrType("Ptr")  # as ns3/ns/__init__.py does: Ptr<T> behaves as T in Python
    cppyy.add_include_path(str(root / "include"))
    cppyy.add_include_path(str(HEADER_DIR))
    for module in NS3_MODULES:
        library = libdir / f"libns{NS3_VERSION}-{module}.so"
        if not library.exists():
            raise MissingDependencyError(
                f"{library} is missing from the ns3 wheel; reinstall with {INSTALL_HINT}")
        cppyy.load_library(str(library))
    for module in NS3_MODULES:
        cppyy.include(f"ns3/{module}-module.h")
    for header in OUR_HEADERS:
        cppyy.include(header)
    gbl: Any = cppyy.gbl
    return SimpleNamespace(ns3=gbl.ns3, phantora=gbl.phantora, std=gbl.std)
