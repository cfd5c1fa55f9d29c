"""A Deployment's container run as a pod would run it, without a container runtime or kubelet.

This workplace cannot run containers, so the parts of a pod that the operator
can notice are made from Linux namespaces instead, by the same means a
runtime uses:

- a network namespace held by a "pause" process, with a veth pair to the host:
  the pod has its own IP, and the container's ports (8080, 8081, 9443 as the
  manifest says) cannot clash with anything else on the machine;
- a mount namespace: the service-account files at the fixed in-cluster path
  (/var/run/secrets/kubernetes.io/serviceaccount), each volume at its
  mountPath, and the root filesystem read-only when the container asks;
- a UTS namespace whose hostname is the pod's name;
- the container's user and group, no capabilities, no privilege escalation.

What it does not give: the image itself (the installed package of this
machine runs), cgroup limits and seccomp (the sandbox refuses them).
Linux and root only; `PodSandbox.available()` says why not otherwise.
"""

from __future__ import annotations

import asyncio
import os
import random
import re
import shlex
import shutil
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from types import TracebackType
from typing import Any

from lessor.tools.controlplane.processes import Child

SERVICE_ACCOUNT_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"


@dataclass(frozen=True)
class Mount:
    """A host folder shown at `path` inside the pod."""

    source: Path
    path: str
    read_only: bool = True


class PodSandbox:
    """The pause process and the pod's network; `mount` makes its filesystem, `container` a process in it."""

    def __init__(self, directory: Path, hostname: str) -> None:
        self.directory = directory
        self.hostname = hostname
        tag = f"{random.getrandbits(24):06x}"
        self._host_if, self._pod_if = f"lsr{tag}h", f"lsr{tag}p"
        # A random /30 in 10.200-249.x.x: parallel sandboxes on one machine do not meet.
        prefix, last = f"10.{random.randint(200, 249)}.{random.randint(0, 255)}", 4 * random.randint(0, 63)
        self.host_ip, self.pod_ip = f"{prefix}.{last + 1}", f"{prefix}.{last + 2}"
        self._pause = Child("pause", ["unshare", "--net", "--mount", "--uts", "--propagation", "private",
                                      "sleep", "infinity"], directory / "pause.log")

    @staticmethod
    def available() -> str | None:
        """None when a sandbox can be made here, else the reason it cannot."""
        if os.geteuid() != 0:
            return "making network and mount namespaces needs root"
        missing = [t for t in ("unshare", "nsenter", "setpriv", "ip", "mount") if shutil.which(t) is None]
        if missing:
            return f"missing tools: {', '.join(missing)}"
        probe = subprocess.run(["unshare", "--net", "--mount", "--uts", "true"], capture_output=True, text=True)
        if probe.returncode != 0:
            return f"unshare refused: {probe.stderr.strip()}"
        return None

    async def __aenter__(self) -> PodSandbox:
        self.directory.mkdir(parents=True, exist_ok=True)
        await self._pause.start()
        assert self._pause.process is not None
        pid = str(self._pause.process.pid)
        try:
            await self._unshared(pid)
            _sh(["ip", "link", "add", self._host_if, "type", "veth", "peer", "name", self._pod_if, "netns", pid])
            _sh(["ip", "addr", "add", f"{self.host_ip}/30", "dev", self._host_if])
            _sh(["ip", "link", "set", self._host_if, "up"])
            self._inside(["ip", "link", "set", "lo", "up"], "-n")
            self._inside(["ip", "addr", "add", f"{self.pod_ip}/30", "dev", self._pod_if], "-n")
            self._inside(["ip", "link", "set", self._pod_if, "up"], "-n")
            self._inside(["hostname", self.hostname], "-u")
        except BaseException:
            await self._pause.stop()
            raise
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self._pause.stop()  # the namespace goes with its last process, and the veth pair with it
        await asyncio.to_thread(subprocess.run, ["ip", "link", "del", self._host_if], capture_output=True)  # if it did not

    async def _unshared(self, pid: str, timeout: float = 10.0) -> None:
        """Wait until the pause process has left this process's namespaces (it starts as our child)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if all(os.readlink(f"/proc/{pid}/ns/{ns}") != os.readlink(f"/proc/self/ns/{ns}")
                       for ns in ("net", "mnt", "uts")):
                    return
            except OSError:
                pass
            if not self._pause.running:
                break
            await asyncio.sleep(0.01)
        raise RuntimeError(f"the pause process did not get its own namespaces: {self._pause.log_tail()}")

    def mount(self, mounts: Sequence[Mount], *, read_only_root: bool, image: Sequence[Path] = ()) -> None:
        """Make the pod's filesystem: service-account files and volumes; then the root read-only.

        `image`: host folders the image would hold where anyone may read them (the Python
        interpreter, when it lives under a private home folder here), shown to the container
        without opening the private folder to it."""
        var_run = os.path.realpath("/var/run")  # /run, mostly; a tmpfs there holds the secrets folder
        script = ["set -e", f"mount -t tmpfs -o size=1m,mode=755 tmpfs {var_run}"]
        script += _reachable(image, keep=var_run)
        # An image folder below a volume's mountPath (a checkout under /tmp, where the manifest mounts
        # its emptyDir) is held aside first and put back on top of the volume afterwards: in an image
        # the installed package is never under a volume, so the container must still see it.
        covered = [f for f in image if any(f.is_relative_to(m.path) for m in mounts)]
        for i, folder in enumerate(covered):
            script += [f"mkdir -p {var_run}/.covered{i}", f"mount --bind {shlex.quote(str(folder))} {var_run}/.covered{i}"]
        overlaid: set[str] = set()
        for m in mounts:
            target = PurePosixPath(m.path)
            missing = next((p for p in (*reversed(target.parents), target) if not Path(p).exists()), None)
            if missing is not None and not any(missing.is_relative_to(r) for r in ("/var/run", var_run)):
                # A mount point the image would have: an overlay on its parent holds it, off the host.
                parent = str(missing.parent)
                if parent not in overlaid:
                    layer = self.directory / "overlay" / parent.strip("/").replace("/", "_")
                    (layer / "up").mkdir(parents=True, exist_ok=True)
                    (layer / "work").mkdir(parents=True, exist_ok=True)
                    script.append(f"mount -t overlay overlay -o lowerdir={parent},upperdir={layer / 'up'},"
                                  f"workdir={layer / 'work'} {parent}")
                    overlaid.add(parent)
            script += [f"mkdir -p {shlex.quote(m.path)}", f"mount --bind {shlex.quote(str(m.source))} {shlex.quote(m.path)}"]
            if m.read_only:
                script.append(f"mount -o remount,bind,ro {shlex.quote(m.path)}")
        for i, folder in enumerate(covered):
            script += [f"mkdir -p {shlex.quote(str(folder))}", f"mount --move {var_run}/.covered{i} {shlex.quote(str(folder))}",
                       f"mount -o remount,bind,ro {shlex.quote(str(folder))}"]
        if read_only_root:
            script += [f"mount -o remount,ro {p}" for p in sorted(overlaid)]
            script += [f"mount -o remount,ro {var_run}", "mount -o remount,bind,ro /"]
        self._inside(["sh", "-c", "\n".join(script)], "-m")

    def container(self, name: str, argv: Sequence[str], *, env: Mapping[str, str], user: int, group: int,
                  workdir: str = "/") -> Child:
        """A process in the pod's namespaces, as `user`:`group`, with only `env` and no capabilities."""
        assert self._pause.process is not None
        return Child(name, [
            "nsenter", "-t", str(self._pause.process.pid), "-n", "-m", "-u", f"--wd={workdir}", "--",
            "setpriv", f"--reuid={user}", f"--regid={group}", "--clear-groups", "--no-new-privs",
            "--inh-caps=-all", "--bounding-set=-all", "--",
            "env", "-i", *(f"{k}={v}" for k, v in env.items()), *argv,
        ], self.directory / f"{name}.log")

    def _inside(self, argv: list[str], *namespaces: str) -> None:
        assert self._pause.process is not None
        _sh(["nsenter", "-t", str(self._pause.process.pid), *namespaces, "--", *argv])


def _reachable(folders: Sequence[Path], *, keep: str) -> list[str]:
    """Commands that put each folder behind a closed parent (mode without o+x) under an open one
    (a tmpfs over the parent); `keep` is a writable folder to hold the folder's mount meanwhile."""
    script: list[str] = []
    for i, folder in enumerate(folders):
        closed = next((p for p in reversed(folder.parents) if not p.stat().st_mode & 0o001), None)
        if closed is None:
            continue
        held = f"{keep}/.image{i}"
        script += [f"mkdir -p {held}", f"mount --bind {shlex.quote(str(folder))} {held}",
                   f"mount -t tmpfs -o size=1m,mode=755 tmpfs {shlex.quote(str(closed))}",
                   f"mkdir -p {shlex.quote(str(folder))}", f"mount --move {held} {shlex.quote(str(folder))}",
                   f"mount -o remount,bind,ro {shlex.quote(str(folder))}"]
    return script


def _sh(argv: list[str]) -> None:
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{shlex.join(argv)} failed: {done.stderr.strip()}")


def container_of(deployment: Mapping[str, Any], name: str | None = None) -> dict[str, Any]:
    """The named (else the first) container of a Deployment's pod template."""
    containers = deployment["spec"]["template"]["spec"]["containers"]
    return next(c for c in containers if name is None or c["name"] == name)


def resolve_env(container: Mapping[str, Any], pod: Mapping[str, Any]) -> dict[str, str]:
    """The container's env as the kubelet resolves it: values, and fieldRefs into the pod object."""
    env: dict[str, str] = {}
    for var in container.get("env", []):
        if "value" in var:
            env[var["name"]] = str(var["value"])
            continue
        path = var["valueFrom"]["fieldRef"]["fieldPath"]
        value: Any = pod
        for part in path.split("."):
            value = value[part]
        env[var["name"]] = str(value)
    return env


def container_port(container: Mapping[str, Any], port: int | str) -> int:
    """A port number, or the containerPort of a named port."""
    if isinstance(port, int):
        return port
    return next(int(p["containerPort"]) for p in container.get("ports", []) if p["name"] == port)


def expand(argv: Sequence[str], env: Mapping[str, str]) -> list[str]:
    """The container's command as the kubelet runs it: `$(VAR)` of a defined variable replaced by its value,
    `$$` an escaped `$`, anything else left as written."""
    def one(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        return env.get(match.group(1), match.group(0))

    return [re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)", one, arg) for arg in argv]


def flag(argv: Sequence[str], name: str) -> str | None:
    """The value of `--name VALUE` (or `--name=VALUE`) in a command line, or None."""
    for i, arg in enumerate(argv):
        if arg == name and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith(f"{name}="):
            return arg.split("=", 1)[1]
    return None
