"""Where a long-running node's memory goes: with OXYGEN_MEMORY_TRACE=SECONDS set, a daemon
thread prints to stderr, every SECONDS, the node's RSS, the Python allocation sites that grew
most since the first report (tracemalloc, diffed snapshots) and the object types whose count
grew (gc). The first report is the baseline, so warm-up stays out of the diff. What
tracemalloc cannot see (torch tensors' data, oneDNN and allocator caches, DDS queues in C)
shows as RSS growth with no Python site to match. Off by default: tracing slows Python's
allocations (`scripts/soak.py --memory-trace` turns it on for the node).
"""
from __future__ import annotations

import gc
import os
import sys
import threading
import tracemalloc
from collections import Counter

ENV = "OXYGEN_MEMORY_TRACE"
TOP = 8


def _rss_mb() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) / 1024 for line in f if line.startswith("VmRSS:"))


def _type_counts() -> Counter:
    return Counter(type(o).__name__ for o in gc.get_objects())


def _report(baseline, types0: Counter, rss0: float, out) -> None:
    snapshot = tracemalloc.take_snapshot().filter_traces([tracemalloc.Filter(False, tracemalloc.__file__)])
    growth = [d for d in snapshot.compare_to(baseline, "lineno") if d.size_diff > 0][:TOP]
    types = _type_counts()
    grown = sorted(((n - types0.get(t, 0), t) for t, n in types.items()), reverse=True)[:TOP]
    traced, _peak = tracemalloc.get_traced_memory()
    lines = [f"memory trace: RSS {_rss_mb():.0f} MB ({_rss_mb() - rss0:+.0f} since the baseline), "
             f"Python-traced {traced / 2**20:.1f} MB"]
    lines += [f"  {d.size_diff / 1024:+9.1f} KB {d.count_diff:+7d} blocks  {d.traceback[0]}" for d in growth]
    lines += [f"  {n:+7d} {t}" for n, t in grown if n > 0]
    print("\n".join(lines), file=out, flush=True)


def start_from_env(out=sys.stderr) -> threading.Thread | None:
    """Start the reporting thread if OXYGEN_MEMORY_TRACE names a period in seconds."""
    value = os.environ.get(ENV, "")
    if not value:
        return None
    try:
        period = float(value)
        if period <= 0:
            raise ValueError
    except ValueError:
        print(f"{ENV}={value!r} is not a period in seconds: memory trace off", file=out, flush=True)
        return None
    tracemalloc.start()
    stop = threading.Event()

    def run():
        if stop.wait(period):
            return
        baseline = tracemalloc.take_snapshot()
        types0, rss0 = _type_counts(), _rss_mb()
        print(f"memory trace: baseline at RSS {rss0:.0f} MB, a report every {period:g} s", file=out, flush=True)
        while not stop.wait(period):
            _report(baseline, types0, rss0, out)

    thread = threading.Thread(target=run, name="memory-trace", daemon=True)
    thread.start()
    return thread
