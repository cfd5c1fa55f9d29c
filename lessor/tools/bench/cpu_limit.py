"""A CPU quota for a bench's operator process, as a pod's `resources.limits.cpu` gives one: each process
started through `CpuQuota.popen` runs in a cgroup of its own (a child of the cgroup v2 mount, with
`cpu.max`, or of cgroup v1's cpu controller, with `cpu.cfs_quota_us` / `cpu.cfs_period_us`), placed there
before it executes anything, and the group is removed once the process has ended.

A quota, unlike CPU hogs beside the process, is what a cluster gives a pod: the process gets at most its
share of every scheduling period however idle the machine is, and is throttled for the rest of the period.
"""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from lessor.tools.bench.common import say

#: The CFS period Kubernetes gives a container (100 ms), and the kernel's smallest quota (1 ms).
PERIOD_US = 100_000
MIN_QUOTA_US = 1_000
V2_ROOT = Path("/sys/fs/cgroup")
V1_ROOT = Path("/sys/fs/cgroup/cpu")
MOUNTS = Path("/proc/self/mounts")


class CpuLimitUnavailable(RuntimeError):
    """No cgroup this process may create a CPU-limited child in."""


def parse_cpu(text: str) -> int:
    """A Kubernetes CPU quantity ("200m", "0.5", "1") in millicores. Like the API server, a quantity finer than
    1m is refused rather than rounded to nothing."""
    raw = text.strip()
    try:
        value = Decimal(raw[:-1]) / 1000 if raw.endswith("m") else Decimal(raw)
    except InvalidOperation:
        raise ValueError(f"not a CPU quantity: {text!r} (e.g. 200m, 0.5, 1)") from None
    if not value.is_finite() or value <= 0:
        raise ValueError(f"a CPU limit must be more than 0: {text!r}")
    millis = value * 1000
    if millis != millis.to_integral_value():
        raise ValueError(f"a CPU quantity is at most precise to 1m: {text!r}")
    return int(millis)


def quota_us(millicores: int, period_us: int = PERIOD_US) -> int:
    """The CFS quota per period for `millicores`, as the kubelet computes it (at least the kernel's 1 ms)."""
    return max(MIN_QUOTA_US, millicores * period_us // 1000)


@dataclass(frozen=True)
class Cgroups:
    """Where CPU-limited groups can be made: `version` 2 (cpu.max) or 1 (cpu.cfs_quota_us), under `root`."""

    version: int
    root: Path

    def make(self, name: str, millicores: int) -> Path:
        """A child group `name` limited to `millicores`; its path."""
        if self.version == 2 and "cpu" not in _words(self.root / "cgroup.subtree_control"):
            (self.root / "cgroup.subtree_control").write_text("+cpu")  # the children get the cpu controller
        group = self.root / name
        group.mkdir()
        quota = quota_us(millicores)
        try:
            if self.version == 2:
                (group / "cpu.max").write_text(f"{quota} {PERIOD_US}")
            else:
                (group / "cpu.cfs_period_us").write_text(str(PERIOD_US))
                (group / "cpu.cfs_quota_us").write_text(str(quota))
        except OSError:
            with contextlib.suppress(OSError):
                group.rmdir()
            raise
        return group


def _words(path: Path) -> list[str]:
    try:
        return path.read_text().split()
    except OSError:
        return []


def _v2_problem(root: Path) -> str | None:
    if not (root / "cgroup.controllers").is_file():
        return f"{root} is not a cgroup v2 mount (no cgroup.controllers)"
    if "cpu" not in _words(root / "cgroup.controllers"):
        return f"the cpu controller is not available in {root} (not in cgroup.controllers)"
    if not os.access(root, os.W_OK):
        return f"{root} is not writable"
    return None


def _v1_problem(root: Path) -> str | None:
    if not all((root / f).is_file() for f in ("cpu.cfs_quota_us", "cpu.cfs_period_us")):
        return f"{root} is not cgroup v1's cpu controller (no cpu.cfs_quota_us / cpu.cfs_period_us)"
    if not os.access(root, os.W_OK):
        return f"{root} is not writable"
    return None


def mounted(mounts: str) -> tuple[Path, Path]:
    """(the cgroup v2 mount, cgroup v1's cpu controller mount) named in `mounts` (/proc/self/mounts' text), each
    its usual place when not mounted: a hybrid host mounts v2 at /sys/fs/cgroup/unified, v1's cpu may share
    its mount with cpuacct."""
    rows = [line.split() for line in mounts.splitlines() if len(line.split()) >= 4]
    v2 = next((Path(w[1]) for w in rows if w[2] == "cgroup2"), V2_ROOT)
    v1 = next((Path(w[1]) for w in rows if w[2] == "cgroup" and "cpu" in w[3].split(",")), V1_ROOT)
    return v2, v1


def detect(v2_root: Path | None = None, v1_root: Path | None = None) -> Cgroups:
    """cgroup v2 at `v2_root` if its cpu controller is there and writable, else cgroup v1's cpu controller at
    `v1_root` (each by default where this machine mounts it); else `CpuLimitUnavailable` naming both and what
    each lacks."""
    v2_mount, v1_mount = mounted(MOUNTS.read_text() if MOUNTS.is_file() else "")
    v2_root, v1_root = v2_root or v2_mount, v1_root or v1_mount
    if (v2 := _v2_problem(v2_root)) is None:
        return Cgroups(2, v2_root)
    if (v1 := _v1_problem(v1_root)) is None:
        return Cgroups(1, v1_root)
    raise CpuLimitUnavailable(
        f"--cpu-limit needs a cgroup this process may write: cgroup v2: {v2}; cgroup v1: {v1}. Run the bench as "
        "root, or where /sys/fs/cgroup is mounted read-write (a container needs --privileged or a writable "
        "cgroup namespace), or without --cpu-limit (the CPU hogs give a busy node instead)")


@dataclass
class CpuQuota:
    """Processes each under a CPU limit of `millicores`, in a cgroup of its own under `cgroups`."""

    cpu: str
    millicores: int
    cgroups: Cgroups
    groups: dict[int, Path] = field(default_factory=dict)
    made: int = 0

    @classmethod
    def of(cls, cpu: str, v2_root: Path | None = None, v1_root: Path | None = None) -> CpuQuota:
        """A quota of `cpu` (a Kubernetes quantity) where this machine allows one, tried once by making a group
        and removing it, so that a bench stops before it starts anything."""
        quota = cls(cpu, parse_cpu(cpu), detect(v2_root, v1_root))
        try:
            _remove(quota.cgroups.make(f"lessor-bench-{os.getpid()}-probe", quota.millicores))
        except OSError as err:
            raise CpuLimitUnavailable(f"--cpu-limit: could not make a CPU-limited cgroup in {quota.cgroups.root} "
                                      f"(cgroup v{quota.cgroups.version}): {err}") from None
        return quota

    def popen(self, argv: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
        """`argv` started in a new group: a shell writes its own pid into the group, then executes `argv` in
        its place (the same pid), so that nothing of the process runs outside the limit."""
        self.made += 1
        group = self.cgroups.make(f"lessor-bench-{os.getpid()}-{self.made}", self.millicores)
        try:
            proc: subprocess.Popen[bytes] = subprocess.Popen(
                ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', str(group / "cgroup.procs"), *argv], **kwargs)
        except BaseException:
            _remove(group)
            raise
        self.groups[proc.pid] = group
        return proc

    def ended(self, proc: subprocess.Popen[bytes]) -> None:
        """Remove the group of `proc`, which has ended and been waited for."""
        if (group := self.groups.pop(proc.pid, None)) is not None:
            _remove(group)

    def close(self) -> None:
        """Remove every group left (their processes have ended)."""
        for group in self.groups.values():
            _remove(group)
        self.groups.clear()

    def report(self) -> dict[str, Any]:
        """The limit as a bench's JSON shows it."""
        return {"cpu": self.cpu, "millicores": self.millicores, "cgroup": f"v{self.cgroups.version}",
                "parent": str(self.cgroups.root), "quota_us": quota_us(self.millicores), "period_us": PERIOD_US}


def _remove(group: Path) -> None:
    try:
        group.rmdir()
    except FileNotFoundError:
        pass
    except OSError as err:  # a process still in it: the group stays, named
        if err.errno not in (errno.EBUSY, errno.ENOTEMPTY):
            raise
        say(f"could not remove {group}: {err}")
