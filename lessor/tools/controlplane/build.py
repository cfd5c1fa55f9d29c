"""Build etcd, kube-apiserver and kube-controller-manager from Go modules, once, and cache them.

`k8s.io/kubernetes` declares its `k8s.io/*` staging modules at v0.0.0 and points
them at `./staging`, which a module download does not have. The build module
therefore replaces each of them with the published `v0.X.Y`, and the list is
read from that release's own go.mod rather than typed here. etcd is built from
`go.etcd.io/etcd/server/v3` at the version the same go.mod requires.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from lessor.tools.controlplane.versions import KUBERNETES_VERSION

T = TypeVar("T")

BIN_ENV = "LESSOR_CONTROLPLANE_BIN"
_MODULE = "k8s.io/kubernetes"
_ETCD_MODULE = "go.etcd.io/etcd/server/v3"
_COMMANDS = {
    "kube-apiserver": f"{_MODULE}/cmd/kube-apiserver",
    "kube-controller-manager": f"{_MODULE}/cmd/kube-controller-manager",
    "etcd": "./cmd/etcd",
}
_ETCD_MAIN = """package main

import (
\t"os"

\t"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
"""

Progress = Callable[[str], None]


class BuildError(RuntimeError):
    """The control plane could not be built; the message says which step and what to do."""


@dataclass(frozen=True)
class Binaries:
    etcd: Path
    kube_apiserver: Path
    kube_controller_manager: Path | None

    @classmethod
    def in_directory(cls, directory: Path) -> Binaries:
        missing = [n for n in ("etcd", "kube-apiserver") if not (directory / n).is_file()]
        if missing:
            raise BuildError(
                f"{BIN_ENV}={directory} has no {', '.join(missing)}; "
                "point it at a folder with etcd and kube-apiserver (kube-controller-manager optional), "
                f"or unset it to build them from Go modules"
            )
        kcm = directory / "kube-controller-manager"
        return cls(directory / "etcd", directory / "kube-apiserver", kcm if kcm.is_file() else None)


def user_cache(name: str) -> Path:
    """lessor's folder `name` under the user's cache folder (XDG_CACHE_HOME, else ~/.cache)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "lessor" / name


def cache_root() -> Path:
    return user_cache("controlplane")


def _recipe_key() -> str:
    """Changes whenever what we build or how we build it changes."""
    recipe = json.dumps([KUBERNETES_VERSION, _COMMANDS, _ETCD_MAIN, _ldflags()], sort_keys=True)
    return f"v{KUBERNETES_VERSION}-{hashlib.sha256(recipe.encode()).hexdigest()[:10]}"


def _ldflags() -> str:
    major, minor, _ = KUBERNETES_VERSION.split(".")
    pairs = {
        "gitVersion": f"v{KUBERNETES_VERSION}",
        "gitMajor": major,
        "gitMinor": minor,
        "gitTreeState": "clean",
    }
    xs = []
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        xs += [f"-X {pkg}.{k}={v}" for k, v in pairs.items()]
    return " ".join(["-s", "-w", *xs])


def ensure_binaries(progress: Progress | None = None) -> Binaries:
    """Return cached binaries, building them first if this machine has none for this version."""
    say = progress or _stderr
    if override := os.environ.get(BIN_ENV):
        return Binaries.in_directory(Path(override))
    target = cache_root() / _recipe_key()
    if _complete(target):
        return Binaries.in_directory(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    with _locked(target.parent / ".build.lock", say):
        if not _complete(target):  # another process may have built it while we waited
            _build(target, say)
    return Binaries.in_directory(target)


def _complete(target: Path) -> bool:
    return (target / ".complete").is_file()


@contextlib.contextmanager
def _locked(path: Path, say: Progress) -> Iterator[None]:
    with open(path, "w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say("another lessor process is building the control plane; waiting for it")
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _build(target: Path, say: Progress) -> None:
    go = shutil.which("go")
    if go is None:
        raise BuildError(
            "the local control plane is built from Go modules, but `go` is not on PATH; "
            f"install Go >= 1.25, or set {BIN_ENV} to a folder with etcd and kube-apiserver"
        )
    say(f"building the local control plane (Kubernetes v{KUBERNETES_VERSION}) into {target}")
    say("this happens once per machine and version and takes several minutes on 2 cores")
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="build-", dir=target.parent) as tmp:
        work = Path(tmp)
        env = _go_env(go)
        steps = 3 + len(_COMMANDS)
        k8s_mod = _step(1, steps, f"resolving {_MODULE}@v{KUBERNETES_VERSION}", say, started,
                        lambda: _kubernetes_gomod(go, work, env))
        replaces, etcd_version = _staging_replaces(k8s_mod), _required_version(k8s_mod, _ETCD_MODULE)
        _write_module(work, replaces)
        _step(2, steps, f"downloading modules (etcd {etcd_version})", say, started, lambda: _run(
            [go, "get", *(f"{p}@v{KUBERNETES_VERSION}" for p in _COMMANDS.values() if p.startswith(_MODULE)),
             f"{_ETCD_MODULE}@{etcd_version}"], work, env))
        out = work / "bin"
        for i, (name, pkg) in enumerate(_COMMANDS.items(), start=3):
            _step(i, steps, f"compiling {name}", say, started, functools.partial(
                _run, [go, "build", "-ldflags", _ldflags(), "-o", str(out / name), pkg], work, env))
        _step(steps, steps, "installing into the cache", say, started, lambda: _install(out, target))
    say(f"control plane built in {_elapsed(started)}")


def _step(i: int, n: int, what: str, say: Progress, started: float, fn: Callable[[], T]) -> T:
    say(f"[{i}/{n}] {what}")
    done = threading.Event()

    def ticker() -> None:
        while not done.wait(30):
            say(f"[{i}/{n}] still {what} ({_elapsed(started)} elapsed)")

    thread = threading.Thread(target=ticker, daemon=True)
    thread.start()
    try:
        return fn()
    finally:
        done.set()


def _go_env(go: str) -> dict[str, str]:
    env = dict(os.environ)
    version = subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True).stdout.strip()
    # A recent enough local Go is used as it is; an older one (>= 1.21) fetches the toolchain
    # that the build module's `go` line asks for, through the Go module proxy.
    if _version_tuple(version) >= (1, 25):
        env["GOTOOLCHAIN"] = "local"
    env["GOFLAGS"] = (env.get("GOFLAGS", "") + " -mod=mod -buildvcs=false").strip()
    env.setdefault("CGO_ENABLED", "0")
    return env


def _version_tuple(goversion: str) -> tuple[int, ...]:
    digits = goversion.removeprefix("go").split(" ")[0].split("-")[0]
    try:
        return tuple(int(p) for p in digits.split(".")[:2])
    except ValueError:
        return (0,)


def _run(argv: list[str], cwd: Path, env: dict[str, str]) -> str:
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-25:])
        raise BuildError(f"`{' '.join(argv)}` failed (exit {proc.returncode}):\n{tail}")
    return proc.stdout


def _kubernetes_gomod(go: str, work: Path, env: dict[str, str]) -> str:
    info = json.loads(_run([go, "mod", "download", "-json", f"{_MODULE}@v{KUBERNETES_VERSION}"], work, env))
    return Path(info["GoMod"]).read_text()


def _staging_replaces(gomod: str) -> list[str]:
    """Modules that the release's go.mod points at ./staging (derived, never typed)."""
    mods = []
    for line in gomod.splitlines():
        parts = line.split()
        if "=>" in parts and parts[-1].startswith("./staging/"):
            mods.append(parts[0] if parts[0] != "replace" else parts[1])
    if not mods:
        raise BuildError(f"found no ./staging replace directives in {_MODULE} v{KUBERNETES_VERSION}'s go.mod")
    return mods


def _required_version(gomod: str, module: str) -> str:
    for line in gomod.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] == module:
            return parts[1]
    raise BuildError(f"{_MODULE} v{KUBERNETES_VERSION} does not require {module}")


def _write_module(work: Path, staging: list[str]) -> None:
    minor = KUBERNETES_VERSION.split(".", 1)[1]
    replace = "\n".join(f"\t{m} => {m} v0.{minor}" for m in staging)
    (work / "go.mod").write_text(
        f"module lessor.dev/controlplane\n\ngo 1.25.0\n\nrequire {_MODULE} v{KUBERNETES_VERSION}\n\n"
        f"replace (\n{replace}\n)\n"
    )
    (work / "cmd" / "etcd").mkdir(parents=True)
    (work / "cmd" / "etcd" / "main.go").write_text(_ETCD_MAIN)


def _install(out: Path, target: Path) -> None:
    if target.exists():
        shutil.rmtree(target)
    (out / ".complete").write_text(KUBERNETES_VERSION + "\n")
    out.rename(target)


def _elapsed(started: float) -> str:
    seconds = int(time.monotonic() - started)
    return f"{seconds // 60}m{seconds % 60:02d}s"


def _stderr(line: str) -> None:
    print(f"lessor: {line}", file=sys.stderr, flush=True)
