"""Few malloc arenas for a node that runs for hours.

glibc gives each thread that allocates an arena of its own (up to 8 per core); the node
has ~25 threads (executor, DDS, torch) and frees in one thread what another allocated, so
each arena keeps its own free fragments and the process's RSS creeps up with them. In
soaks of the tiny profile at 10 Hz the node grew ~5 MB a minute with glibc's default and
stayed flat with 2 arenas (307 -> 305 MB over 3 minutes, and 30 MB smaller). `limit` caps
the arenas with mallopt before the threads start; OXYGEN_MALLOC_ARENAS overrides the
count (0 keeps glibc's default); `trim` gives freed memory back after cleanup. Not glibc
(musl, macOS): nothing to do.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os

DEFAULT_ARENAS = 2
ENV = "OXYGEN_MALLOC_ARENAS"
M_ARENA_MAX = -8          # glibc's mallopt parameter number (malloc.h)


def limit(default: int = DEFAULT_ARENAS) -> int | None:
    """Cap glibc's malloc arenas; returns the cap set, or None where nothing was set."""
    value = os.environ.get(ENV, "")
    try:
        arenas = int(value) if value else default
    except ValueError:
        raise ValueError(f"{ENV}={value!r} is not a number of malloc arenas (0 = glibc's default)") from None
    if arenas <= 0:
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return None
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return arenas if mallopt(M_ARENA_MAX, arenas) == 1 else None


def trim() -> None:
    """Give the freed model back to the OS. glibc keeps freed memory in the malloc arena that
    allocated it, and each configure runs on whichever executor thread takes it: smol's
    ~0.75 GB stayed resident after cleanup, once per arena configure had used (RSS after
    cleanup 1.1, 1.9, 1.9 GB in three cycles with the node's 2 arenas; 0.34-0.38 GB trimmed)."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):     # not glibc: nothing to trim this way
        pass
