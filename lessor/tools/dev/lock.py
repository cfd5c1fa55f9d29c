"""One `lessor dev` (or `lessor controlplane`) per folder: a second one would rewrite the first's
certificates and kill it. The lock is an flock on `DIR/lessor.pid`, so a process that died without
cleaning up (SIGKILL, a power cut) leaves a stale file but never a held lock."""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
from collections.abc import Callable, Iterator
from pathlib import Path


class AlreadyRunning(RuntimeError):
    """Another live process holds the folder's lock; the message says which and what to do."""


def _describe(text: str) -> str:
    fields = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
    return ", ".join(f"{k} {v}" for k, v in fields.items() if k in ("pid", "command", "since")) or "unknown process"


@contextlib.contextmanager
def folder_lock(directory: Path, command: str, say: Callable[[str], None], *, since: str,
                independent: str = "another --dir") -> Iterator[Path]:
    """Hold `directory`'s lock for the duration; refuse with AlreadyRunning if a live process has it."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "lessor.pid"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _describe(path.read_text(errors="replace"))
            raise AlreadyRunning(
                f"{command} is already running in {directory} ({holder}). Use that one (its kubeconfig "
                f"is still valid), stop it with Ctrl-C in its terminal, or start an independent one with "
                f"{independent}") from None
        if previous := os.read(fd, 4096).decode(errors="replace").strip():
            say(f"found a stale lock {path} ({_describe(previous)}, no longer running); taking it over")
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid={os.getpid()}\ncommand={command}\nsince={since}\nhost={socket.gethostname()}\n".encode(), 0)
        try:
            yield path
        finally:
            path.unlink(missing_ok=True)
            say(f"removed the lock {path}")
    finally:
        os.close(fd)
