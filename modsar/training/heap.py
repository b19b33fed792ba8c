"""Keep a trial's resident memory near what it uses, without page faults where the time goes.

glibc's malloc keeps freed blocks below a moving threshold (it rises to the largest freed block, up to
32 MiB) in its heap. Training, whose large tensors change size from batch to batch (token batches), then
fragments that heap: a Video CE run grew to 1.1-1.5 GiB while using ~0.6. `bound_heap` fixes the threshold
at 4 MiB during training, so every larger block gets its own mapping, returned when freed (the fused CE's
chunk buffers are reused, so this costs no page faults there). Evaluation allocates the same large score
matrix batch after batch; mapping it fresh each time would double the time of a batch, so `roomy_heap`
lets such blocks live in the heap for the pass and trims the heap afterwards.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import sys
from collections.abc import Iterator

M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter
TRAINING_THRESHOLD = 4 << 20
EVALUATION_THRESHOLD = 256 << 20


def _libc():
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.mallopt, libc.malloc_trim  # noqa: B018  (both exist in glibc, not in every C library)
    except (OSError, AttributeError):
        return None
    return libc


def bound_heap(threshold: int = TRAINING_THRESHOLD) -> bool:
    """Set glibc's mmap threshold; False where the C library has no mallopt (or refuses the value)."""
    libc = _libc()
    return libc is not None and bool(libc.mallopt(M_MMAP_THRESHOLD, threshold))


@contextlib.contextmanager
def roomy_heap() -> Iterator[None]:
    """Within the block, blocks up to 256 MiB come from the heap (reused batch after batch); afterwards the
    training threshold is back and the heap's free pages are returned to the system."""
    libc = _libc()
    if libc is None:
        yield
        return
    libc.mallopt(M_MMAP_THRESHOLD, EVALUATION_THRESHOLD)
    try:
        yield
    finally:
        libc.mallopt(M_MMAP_THRESHOLD, TRAINING_THRESHOLD)
        libc.malloc_trim(0)
