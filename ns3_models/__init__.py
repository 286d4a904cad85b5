"""C++ headers JIT-compiled into ns-3 through cppyy (see ``phantora.network.ns3``)."""

from pathlib import Path

HEADER_DIR = Path(__file__).resolve().parent
"""Folder holding ``model/`` and ``helper/``; added to cppyy's include path."""
