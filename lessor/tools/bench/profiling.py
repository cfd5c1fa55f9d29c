"""A sampling profile of the operator's process over a bench's window, by stage and by function (`--profile`).

py-spy samples the running process from outside (it needs ptrace: root, or
`kernel.yama.ptrace_scope` 0), so the operator runs the code a deployment runs,
unchanged. Idle threads are not sampled: a sample is CPU time, and each stage's
share is of the CPU the window spent. A sample goes to the stage of its innermost
frame that names one (`STAGES`): generic library and standard-library frames are
passed over, so that a `copy.deepcopy` inside the topology counts as topology,
and a `json.loads` inside the watch counts as JSON.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

#: (stage, path fragments), tried in this order on each frame's file, from the innermost frame out.
STAGES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("JSON", ("/json/", "/orjson/")),
    ("spans", ("/opentelemetry/", "/lessor/mailbox/tracing.py", "/lessor/telemetry/tracefile.py")),
    ("metrics", ("/prometheus_client/", "/lessor/mailbox/metrics.py", "/lessor/metrics/state.py",
                 "/lessor/metrics/render.py")),
    ("logging", ("/logging/",)),
    ("Events", ("/lessor/events/recorder.py", "/lessor/actors/events.py")),
    ("watch decode", ("/lessor/gateway/informer.py",)),
    ("HTTP client", ("/aiohttp/", "/yarl/", "/multidict/", "/kubernetes_asyncio/", "/lessor/gateway/",
                     "/ssl.py", "/asyncio/sslproto.py")),
    ("topology", ("/lessor/topology/",)),
    ("actor messages", ("/lessor/mailbox/",)),
    ("commit and handlers", ("/lessor/actors/",)),
    ("model", ("/lessor/model/", "/lessor/templates/")),
    ("operator", ("/lessor/",)),
)

#: Frames under which everything runs (the command, the loop's runner): they name no stage.
ROOTS = ("/lessor/cli.py", "/lessor/__main__.py")

#: Whatever else: the event loop's own frames, and the standard library called from no stage's frame.
OTHER = "event loop and other"


def _py_spy() -> str | None:
    """py-spy beside this Python (a venv's, not on PATH unless activated), else on PATH."""
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.exists() else shutil.which("py-spy")


class Profile:
    """`py-spy record` attached to `pid` from `start()` until `stop()`, writing collapsed stacks to `raw`."""

    def __init__(self, pid: int, raw: Path, rate: int = 100) -> None:
        self.pid, self.raw, self.rate = pid, raw, rate
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        exe = _py_spy()
        if exe is None:
            raise RuntimeError("--profile needs py-spy, beside this Python or on PATH")
        self._proc = subprocess.Popen(
            [exe, "record", "--pid", str(self.pid), "--format", "raw", "--full-filenames", "--nolineno", "--gil",
             "--rate", str(self.rate), "--output", str(self.raw)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def stop(self) -> None:
        if self._proc is None:
            return
        self._proc.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
        try:
            self._proc.wait(30)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._proc = None

    def report(self, top: int = 25) -> dict[str, Any]:
        return summarise(self.raw.read_text() if self.raw.exists() else "", top)


def _frames(stack: str) -> list[tuple[str, str]]:
    """(function, file) of each frame of one collapsed stack, outermost first (`func (file)`; the first
    entries of py-spy's raw format may name the process and thread, which have no file)."""
    frames = []
    for frame in stack.split(";"):
        name, sep, rest = frame.rpartition(" (")
        if sep and rest.endswith(")"):
            frames.append((name, rest[:-1]))
    return frames


def stage_of(files: list[str]) -> str:
    """The stage of a sample: the first stage any of its frames' files names, from the innermost out."""
    for file in reversed(files):
        if file.endswith(ROOTS):
            continue
        for stage, fragments in STAGES:
            if any(fragment in file for fragment in fragments):
                return stage
    return OTHER


def _short(file: str) -> str:
    """A file as its package names it: `lessor/mailbox/cell.py`, `json/decoder.py`."""
    if "/site-packages/" in file:
        return file.split("/site-packages/", 1)[1]
    if "/lib/python3" in file:
        return file.split("/lib/python3", 1)[1].split("/", 1)[-1]
    return file


def summarise(raw: str, top: int = 25) -> dict[str, Any]:
    """Stages' shares, and the `top` functions by self and by cumulative samples, of py-spy's collapsed stacks."""
    stages: Counter[str] = Counter()
    own: Counter[str] = Counter()
    total_: Counter[str] = Counter()
    samples = 0
    for line in raw.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = _frames(stack)
        if not frames:
            continue
        samples += count
        stages[stage_of([file for _, file in frames])] += count
        names = [f"{name} ({_short(file)})" for name, file in frames]
        own[names[-1]] += count
        for name in set(names):
            total_[name] += count
    share = 100 / max(samples, 1)
    return {
        "samples": samples,
        "stages_percent": {stage: round(n * share, 1) for stage, n in stages.most_common()},
        "top_self_percent": {name: round(n * share, 1) for name, n in own.most_common(top)},
        "top_cumulative_percent": {name: round(n * share, 1) for name, n in total_.most_common(top)},
        "explained": "py-spy samples of the operator's busy threads over the storm window: each stage's share of "
                     "them (a sample goes to the innermost frame's stage that names one; generic library and "
                     "standard-library frames count for their caller), and the functions with the most samples "
                     "on top of the stack (self) and anywhere in it (cumulative)",
    }
