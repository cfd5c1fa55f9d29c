"""Child processes that die with their parent and stop in order."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import random
import shutil
import signal
import socket
from pathlib import Path

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:  # pragma: no cover - runs in the forked child
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


class Child:
    """One server process; its output goes to a log file, never to the user's terminal."""

    def __init__(self, name: str, argv: list[str], log_path: Path) -> None:
        self.name = name
        self.argv = argv
        self.log_path = log_path
        self.process: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        await self.start_in(None)

    async def start_in(self, cwd: Path | None) -> None:
        argv = list(self.argv)
        preexec = None
        # setpriv sets the parent-death signal without running Python code
        # between fork and exec; prctl through ctypes is the fallback.
        if setpriv := shutil.which("setpriv"):
            argv = [setpriv, "--pdeathsig", "TERM", "--", *argv]
        else:
            preexec = _die_with_parent
        with open(self.log_path, "ab") as log:  # noqa: ASYNC230 (a local log file: opens at once)
            self.process = await asyncio.create_subprocess_exec(
                *argv,
                cwd=cwd,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,  # Ctrl-C reaches us, and we stop children in order
                preexec_fn=preexec,
            )

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.returncode is None

    def log_tail(self, lines: int = 20) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        return ""

    async def stop(self, grace: float = 10.0) -> None:
        proc = self.process
        if proc is None or proc.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), grace)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()


_handed_out: set[int] = set()


def free_port() -> int:
    """A port free now for a server to listen on later. Drawn at random below the kernel's ephemeral range,
    so the outgoing connections made between now and the listen (which take ephemeral ports) cannot take it,
    and never the same one twice in a process; the kernel's own pick when that range has none free."""
    low = _ephemeral_low()
    for _ in range(50):
        port = random.randrange(min(10000, low - 1), low)
        if port in _handed_out:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ephemeral_low() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return max(1025, int(f.read().split()[0]))
    except (OSError, ValueError, IndexError):
        return 32768
