"""What this process holds open, as /proc/self/fd shows it to anyone allowed to look."""

from __future__ import annotations

import gc
import os


def open_descriptors() -> int:
    """How many descriptors this process holds, after a collection: an unreachable object of an earlier
    test still holding a file would otherwise be closed by whichever allocation next runs the collector,
    and a count taken around one call would move for what that call never opened."""
    gc.collect()
    return len(os.listdir("/proc/self/fd"))


def open_files_holding(needle: bytes) -> list[str]:
    """Every descriptor of this process, on a regular file (unlinked ones too), whose content holds
    `needle`: what /proc/PID/fd/N would show anyone allowed to read it."""
    found = []
    for name in os.listdir("/proc/self/fd"):
        link = f"/proc/self/fd/{name}"
        try:
            target = os.readlink(link)
            if not os.path.isfile(link):
                continue
            with open(link, "rb") as f:
                if needle in f.read():
                    found.append(target)
        except OSError:
            continue  # closed meanwhile (the listing's own descriptor, say)
    return found
