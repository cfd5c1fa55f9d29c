"""The operator's probes polled from a thread of the bench's own, as a kubelet would, while a benchmark runs.

A thread, not the bench's event loop: the bench's loop is busy with its own work (a storm's creates, reading
the operator's `/metrics` with a blocking call, which a busy operator answers late), and that lateness would
be counted as the operator's. Each poll waits at most `timeout` (the Deployment's `timeoutSeconds`, 3 s); a poll
that gets no answer by then, or anything but 200, is a failure, as it is for the kubelet."""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request
from typing import Any

from lessor.tools.bench.common import percentile


class ProbePoller:
    """Polls `http://127.0.0.1:{port}{path}` every `every` seconds until stopped."""

    def __init__(self, port: int, path: str, *, every: float = 0.25, timeout: float = 3.0,
                 from_first_answer: bool = False) -> None:
        """`from_first_answer`: polls before the first answer (the port not open yet) are not counted."""
        self.url = f"http://127.0.0.1:{port}{path}"
        self.path = path
        self.every = every
        self.timeout = timeout
        self.latencies: list[float] = []
        self.failures = 0
        self.longest_failing_run = 0  # consecutive failures: the kubelet acts after `failureThreshold` (3) of them
        self.failed_with: list[str] = []  # the first few failures' answers
        self._run = 0
        self._counting = not from_first_answer
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, name=f"bench-probe{path}", daemon=True)

    def start(self) -> ProbePoller:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Idempotent: the last poll may wait up to `timeout`."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def __enter__(self) -> ProbePoller:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    def _poll(self) -> None:
        while not self._stop.is_set():
            began = time.perf_counter()
            why = ""
            try:
                with urllib.request.urlopen(self.url, None, self.timeout) as resp:
                    resp.read()
            except urllib.error.HTTPError as error:
                why = f"{error.code}: {error.read().decode(errors='replace').strip()}"
            except OSError as error:
                why = f"no answer: {error}"
                if not self._counting:
                    self._stop.wait(self.every)
                    continue
            self._counting = True
            self.latencies.append(time.perf_counter() - began)
            if why:
                self.failures += 1
                self._run += 1
                self.longest_failing_run = max(self.longest_failing_run, self._run)
                if len(self.failed_with) < 5:
                    self.failed_with.append(why)
            else:
                self._run = 0
            self._stop.wait(max(0.0, self.every - (time.perf_counter() - began)))

    @property
    def worst(self) -> float:
        return max(self.latencies, default=0.0)

    def report(self) -> dict[str, Any]:
        return {
            "polled": len(self.latencies),
            "failures": self.failures,
            "longest_failing_run": self.longest_failing_run,
            "latency_p50_seconds": round(percentile(self.latencies, 50), 4),
            "latency_p99_seconds": round(percentile(self.latencies, 99), 4),
            "worst_latency_seconds": round(self.worst, 4),
            **({"failed_with": self.failed_with} if self.failed_with else {}),
        }
