"""Keep a trial's resident memory near what it uses.

glibc's malloc keeps freed blocks below a moving threshold (it rises to the largest freed block, up to
32 MiB) in its heap. A run whose large tensors change size from batch to batch (token batches, evaluation
in order of history length) then fragments that heap: a Video CE run grew to 1.1-1.5 GiB while using ~0.6.
A fixed 4 MiB threshold gives every larger block its own mapping, returned to the system when freed; the
fused CE reuses its chunk buffers, so this costs no page faults where the time goes (same epoch time).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter


def bound_heap(threshold: int = 4 << 20) -> bool:
    """Set glibc's mmap threshold (once per process is enough); False where the C library has no mallopt."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(M_MMAP_THRESHOLD, threshold))
