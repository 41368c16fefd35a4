"""Handing freed heap back to the system after a large build.

A build (a million-pattern BM25 index, a replica's copy of the vector index)
allocates and frees many small objects; glibc keeps what was freed inside
its heap, so the process stays as large as its peak. ``malloc_trim(0)``
returns those pages. Nothing happens where the C library is not glibc.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools


def release_freed_memory() -> None:
    """Hand the heap freed by a build back to the system (glibc's
    ``malloc_trim``; nothing elsewhere). A BM25 build's writer and tokenizing
    leave ≈ 170 MiB freed but kept by the allocator at 100,000 patterns: the
    process that built the node's index would otherwise stay that much
    larger than the others."""
    libc = _libc()
    if libc is not None:
        with contextlib.suppress(OSError, AttributeError):
            libc.malloc_trim(0)


@functools.cache
def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name) if name else None
    except OSError:
        return None
