"""How much slower than a quiet machine this test run is: one factor, measured once when the run starts,
that every time limit in the tests is multiplied by (`scaled`). A limit still holds; it is only as long as
this machine needs it to be.

The factor is the largest of 1, the calibration and the load per core:

- the calibration times a short CPU-bound loop five times, wall clock against the thread's own CPU time:
  a process that waits for a core gets less CPU per second (wall / CPU), and a slower processor spends
  more CPU on the same loop than a quiet core of the machine the limits were written on (CPU /
  `REFERENCE_CPU`, counted only when above 1); the median of the rounds' products;
- the load per core: the 1-minute load average over the cores this process may run on, which also counts
  what waits briefly and what the few hundred milliseconds of the calibration may miss.

It is at most `CAP` (a limit that grows without end no longer limits anything: the tests' 100 ms loop-stall
limit stays below the 2 s template time limit it is there to tell apart). LESSOR_TEST_SLOWNESS=F sets it
to F instead (`1` for the written limits, more for a machine known to be slow); pytest's header shows it.
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass

VARIABLE = "LESSOR_TEST_SLOWNESS"
#: The calibration loop's CPU seconds on a quiet core of the machines the limits were written on
#: (measured 10-20 ms there; the upper end, so that such a machine counts as 1).
REFERENCE_CPU = 0.025
CAP = 10.0
ROUNDS = 5


@dataclass(frozen=True)
class Slowness:
    factor: float
    how: str  # what it came from, for the header


def _loop(n: int = 200_000) -> int:
    total = 0
    for i in range(n):
        total += (i * i) % 7
    return total


def measure() -> Slowness:
    """The factor, measured now (about 0.1 s of CPU; longer on a busy machine), or LESSOR_TEST_SLOWNESS's."""
    if given := os.environ.get(VARIABLE):
        factor = float(given)
        if not factor > 0:
            raise ValueError(f"{VARIABLE}={given}: a factor must be positive")
        return Slowness(factor, f"from {VARIABLE}")
    rounds = []
    for _ in range(ROUNDS):
        wall, cpu = time.perf_counter(), time.thread_time()
        _loop()
        wall, cpu = time.perf_counter() - wall, max(time.thread_time() - cpu, 1e-6)
        rounds.append((wall / cpu, cpu))
    calibration = statistics.median(waiting * max(1.0, cpu / REFERENCE_CPU) for waiting, cpu in rounds)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    load = os.getloadavg()[0]
    factor = min(max(1.0, calibration, load / cores), CAP)
    return Slowness(factor, f"calibration {calibration:.2f}, load {load:.1f} on {cores} cores, at most {CAP:g}")


_measured: Slowness | None = None


def slowness() -> Slowness:
    """The run's factor: measured on first use (conftest.py uses it when pytest starts), then the same."""
    global _measured
    if _measured is None:
        _measured = measure()
    return _measured


def scaled(seconds: float, *, at_most: float | None = None) -> float:
    """A time limit written for a quiet machine, for this run. `at_most`: where the limit is itself what a test
    proves (a hand-over quicker than the lease duration can only be a release), the bound it must stay under."""
    limit = seconds * slowness().factor
    return limit if at_most is None else min(limit, max(at_most, seconds))


def described(seconds: float) -> str:
    """`45 s (30 s × slowness 1.5)`, for a failure message."""
    limit = scaled(seconds)
    shown = f"{limit:.3g}" if limit < 100 else f"{limit:.0f}"
    return f"{shown} s ({seconds:g} s × slowness {slowness().factor:.2f})"
