"""`--cpu-limit` of `lessor bench failover` and `bench leases`: Kubernetes CPU quantities, which cgroup a machine
offers (temporary folders standing in for the cgroup mounts), and a real child process under a 100m quota
getting about a tenth of a core."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from lessor.tools.bench import cpu_limit
from lessor.tools.bench.cpu_limit import Cgroups, CpuLimitUnavailable, CpuQuota, detect, mounted, parse_cpu, quota_us
from tests.slowness import scaled


@pytest.mark.parametrize(("text", "millicores"), [
    ("200m", 200), ("100m", 100), ("1m", 1), ("0.5", 500), ("0.25", 250), ("1", 1000), ("1.5", 1500), ("2", 2000),
    (" 300m ", 300),
])
def test_kubernetes_cpu_quantities(text: str, millicores: int) -> None:
    assert parse_cpu(text) == millicores


@pytest.mark.parametrize("text", ["0", "0m", "-1", "-200m", "abc", "", "m", "0.0001", "1.5m", "inf", "nan", "1Gi"])
def test_what_is_no_cpu_limit_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="CPU"):
        parse_cpu(text)


def test_the_quota_per_period_is_the_kubelets() -> None:
    assert quota_us(200) == 20_000 and quota_us(1000) == 100_000 and quota_us(2500) == 250_000
    assert quota_us(1) == 1_000  # the kernel's smallest quota


def _v2(root: Path, controllers: str = "cpuset cpu io memory pids", subtree: str = "cpu") -> Path:
    root.mkdir()
    (root / "cgroup.controllers").write_text(controllers + "\n")
    (root / "cgroup.subtree_control").write_text(subtree + "\n")
    return root


def _v1(root: Path) -> Path:
    root.mkdir()
    for name, value in (("cpu.cfs_quota_us", "-1"), ("cpu.cfs_period_us", "100000"), ("cgroup.procs", "")):
        (root / name).write_text(value + "\n")
    return root


def test_cgroup_v2_with_the_cpu_controller_comes_first(tmp_path: Path) -> None:
    v2, v1 = _v2(tmp_path / "v2"), _v1(tmp_path / "v1")
    assert detect(v2, v1) == Cgroups(2, v2)


def test_cgroup_v1_when_v2_has_no_cpu_controller(tmp_path: Path) -> None:
    v2, v1 = _v2(tmp_path / "v2", controllers="memory pids"), _v1(tmp_path / "v1")
    assert detect(v2, v1) == Cgroups(1, v1)
    assert detect(tmp_path / "absent", v1) == Cgroups(1, v1)


def test_neither_cgroup_is_named_with_what_to_do(tmp_path: Path) -> None:
    v2, v1 = _v2(tmp_path / "v2", controllers="memory"), tmp_path / "v1"
    v1.mkdir()  # a folder, not a cpu controller
    with pytest.raises(CpuLimitUnavailable) as err:
        detect(v2, v1)
    text = str(err.value)
    assert f"the cpu controller is not available in {v2}" in text
    assert f"{v1} is not cgroup v1's cpu controller" in text
    assert "--cpu-limit" in text and "root" in text and "without --cpu-limit" in text


def test_a_cgroup_that_is_not_writable_is_said_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    v2, v1 = _v2(tmp_path / "v2"), _v1(tmp_path / "v1")
    monkeypatch.setattr(cpu_limit.os, "access", lambda path, mode: False)  # as for a user that is not root
    with pytest.raises(CpuLimitUnavailable, match=f"cgroup v2: {v2} is not writable; cgroup v1: {v1} is not writable"):
        detect(v2, v1)


def test_the_mounts_say_where_each_cgroup_is() -> None:
    hybrid = ("tmpfs /sys/fs/cgroup tmpfs rw,relatime,mode=755 0 0\n"
              "cgroup /sys/fs/cgroup/cpuset cgroup rw,relatime,cpuset 0 0\n"
              "cgroup /sys/fs/cgroup/cpu,cpuacct cgroup rw,nosuid,cpu,cpuacct 0 0\n"
              "cgroup2 /sys/fs/cgroup/unified cgroup2 rw,relatime 0 0\n")
    assert mounted(hybrid) == (Path("/sys/fs/cgroup/unified"), Path("/sys/fs/cgroup/cpu,cpuacct"))
    assert mounted("cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid 0 0\n")[0] == Path("/sys/fs/cgroup")
    assert mounted("") == (Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/cpu"))


def test_a_v1_group_gets_the_quota_and_period(tmp_path: Path) -> None:
    group = Cgroups(1, _v1(tmp_path / "v1")).make("r1", 200)
    assert group == tmp_path / "v1" / "r1"
    assert (group / "cpu.cfs_quota_us").read_text() == "20000"
    assert (group / "cpu.cfs_period_us").read_text() == "100000"


def test_a_v2_group_gets_cpu_max_and_its_parent_hands_down_the_controller(tmp_path: Path) -> None:
    v2 = _v2(tmp_path / "v2", subtree="memory")
    group = Cgroups(2, v2).make("r1", 500)
    assert (group / "cpu.max").read_text() == "50000 100000"
    assert (v2 / "cgroup.subtree_control").read_text() == "+cpu"


BURN = """
import time
print(open("/proc/self/cgroup").read(), flush=True)
wall, cpu = time.perf_counter(), time.process_time()
while time.perf_counter() - wall < 2.0:
    pass
print((time.process_time() - cpu) / (time.perf_counter() - wall))
"""


def test_a_process_under_100m_gets_a_tenth_of_a_core() -> None:
    """The child's own CPU time over 2 s of wall time, busy all along: 0.1 with the quota (1.0 on an idle core
    without it; a busy machine may give it less, never more). Its cgroup is its own from its first instruction,
    and is gone once it has ended."""
    try:
        quota = CpuQuota.of("100m")
    except CpuLimitUnavailable as err:
        pytest.skip(f"no writable cgroup on this machine: {err}")
    try:
        proc = quota.popen([sys.executable, "-c", BURN], stdout=subprocess.PIPE)
        group = quota.groups[proc.pid]
        out, _ = proc.communicate(timeout=scaled(60))
        throttled = dict(line.split() for line in (group / "cpu.stat").read_text().splitlines())
        quota.ended(proc)
    finally:
        quota.close()
    lines = out.decode().split("\n")
    share = float(lines[-2])
    assert f"/{group.name}" in "".join(lines[:-2]), lines  # in its group before it ran
    assert 0.02 < share < 0.15, f"the child got {share:.3f} of a core under a 100m quota"
    assert int(throttled["nr_throttled"]) > 0, throttled
    assert not group.exists()
