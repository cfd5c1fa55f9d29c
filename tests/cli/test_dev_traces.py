"""`lessor dev --traces`: Zipkin runs next to the control plane, the operator's spans reach it, one lease is
one trace there, and a headless browser's screenshot of that trace is kept as a test artefact."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from lessor.tools.controlplane import ControlPlane
from lessor.tools.controlplane.build import user_cache
from lessor.tools.controlplane.processes import free_port
from lessor.tools.dev.zipkin import JAR_NAME, trace_url
from lessor.gateway import Gateway
from lessor.gateway.resources import LEASE, NAMESPACE
from tests.app.test_traces import NS, a_lease, lab, ready
from tests.polling import until
from tests.slowness import scaled

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
JAVA = shutil.which("java")
ZIPKIN_AT_HAND = (user_cache("zipkin") / JAR_NAME).is_file() or shutil.which("mvn") is not None


def test_without_java_dev_traces_says_how_to_install_it(tmp_path: Path) -> None:
    lessor = shutil.which("lessor") or str(Path(sys.executable).parent / "lessor")
    out = subprocess.run([lessor, "dev", "--traces", "--dir", str(tmp_path / "dev"),
                          "--health-port", str(free_port()), "--metrics-port", str(free_port()),
                          "--webhook-port", str(free_port()), "--zipkin-port", str(free_port())],
                         cwd=tmp_path, capture_output=True, text=True, timeout=scaled(60),
                         env={"PATH": str(tmp_path), "HOME": str(tmp_path)})  # no java there
    assert out.returncode == 1, out.stderr
    assert "apt-get install default-jre-headless" in out.stderr and "Traceback" not in out.stderr, out.stderr
    assert "control plane" not in out.stderr  # refused before starting anything


@dataclass
class DevWithTraces:
    output: list[str]
    kubeconfig: Path
    zipkin: str  # http://127.0.0.1:PORT
    folder: Path


@pytest.fixture(scope="module")
async def dev_traces(controlplane: ControlPlane, tmp_path_factory: pytest.TempPathFactory,
                     read_until: Callable[..., Awaitable[str]]) -> AsyncIterator[DevWithTraces]:
    if JAVA is None or not ZIPKIN_AT_HAND:
        pytest.skip("java or mvn is not installed: Zipkin cannot be fetched or run")
    folder = tmp_path_factory.mktemp("dev-traces")
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "lessor", "dev", "--traces", "--no-samples", "--dir", str(folder / "dev"),
         "--kubeconfig-out", str(folder / "dev.kubeconfig"), "--health-port", str(free_port()),
         "--metrics-port", str(free_port()), "--webhook-port", str(free_port()), "--zipkin-port", str(port)],
        cwd=folder, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    try:
        await read_until(proc, "Ctrl-C stops everything", lines, timeout=300)  # the jar is fetched once
        yield DevWithTraces(lines, folder / "dev.kubeconfig", f"http://127.0.0.1:{port}", folder)
    finally:
        proc.send_signal(signal.SIGINT)
        _, rest = await asyncio.to_thread(proc.communicate, timeout=scaled(60))
        lines.append(rest or "")
    assert proc.returncode == 0, "".join(lines)
    assert "stopped Zipkin" in "".join(lines)


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=scaled(5)) as resp:
        return json.loads(resp.read())


async def _zipkin_trace_of(base: str, name: str, timeout: float = 60) -> list[dict[str, Any]]:
    """The trace Zipkin holds whose root is the watch event of lease `name`'s creation."""
    query = urllib.parse.urlencode({"serviceName": "lessor", "spanName": "receive lease", "limit": 100,
                                    "annotationQuery": f"k8s.object.name={name} and k8s.event.type=ADDED"})
    deadline = time.monotonic() + scaled(timeout)
    while True:
        found = await asyncio.to_thread(_get, f"{base}/api/v2/traces?{query}")
        # Zipkin finds traces with such a span and such tags anywhere in them: keep the one whose root is the
        # event, and wait for the Ready write to be among its spans (they arrive in batches).
        for spans in found:
            created = any("parentId" not in s and s["name"] == "receive lease" and s["tags"].get("k8s.object.name")
                          == name and s["tags"].get("k8s.event.type") == "ADDED" for s in spans)
            if created and any(s["name"] == "patch lease" and f"/leases/{name}/status" in s["tags"].get("url.full", "")
                               for s in spans):
                return list(spans)
        assert time.monotonic() < deadline, f"no trace of lease {name} with its Ready write in Zipkin: {found}"
        await asyncio.sleep(1)


async def test_dev_traces_prints_the_viewer_and_one_lease_is_one_trace_in_it(dev_traces: DevWithTraces,
                                                                            tmp_path: Path) -> None:
    output = "".join(dev_traces.output)
    search = re.search(rf"open ({re.escape(dev_traces.zipkin)}/zipkin/\?\S+)\s+# traces", output)
    assert search, output
    async with await Gateway.connect(str(dev_traces.kubeconfig)) as kube:
        await kube.create(NAMESPACE, None, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
        await lab(kube, 1)
        await a_lease(kube, "l1")
        await until(kube, LEASE, NS, "l1", ready)
    spans = await _zipkin_trace_of(dev_traces.zipkin, "l1")
    ids = {s["id"] for s in spans}
    roots = [s for s in spans if "parentId" not in s]
    assert [r["name"] for r in roots] == ["receive lease"], [(s["name"], s.get("parentId")) for s in spans]
    assert all("parentId" not in s or s["parentId"] in ids for s in spans), "a span whose parent is elsewhere"
    assert any(s["name"] == "patch exporter" for s in spans), [s["name"] for s in spans]  # the commit, in it
    assert len({s["traceId"] for s in spans}) == 1

    # The same trace from the terminal, out of the file `lessor dev --traces` also writes.
    shown = subprocess.run([sys.executable, "-m", "lessor", "trace", "lease", f"{NS}/l1", "--file",
                            str(dev_traces.folder / "dev" / "traces.jsonl")], capture_output=True, text=True,
                           cwd=tmp_path, timeout=scaled(60))
    assert shown.returncode == 0 and "receive Lease" in shown.stdout, shown.stderr
    # `--url`: the link to that same trace in Zipkin.
    port = int(dev_traces.zipkin.rsplit(":", 1)[1])
    link = subprocess.run([sys.executable, "-m", "lessor", "trace", "lease", f"{NS}/l1", "--url", "--zipkin-port",
                           str(port), "--file", str(dev_traces.folder / "dev" / "traces.jsonl")],
                          capture_output=True, text=True, cwd=tmp_path, timeout=scaled(60))
    url = trace_url(port, roots[0]["traceId"])
    assert (link.returncode, link.stdout) == (0, url + "\n"), link.stderr

    if CHROMIUM is None:
        pytest.skip("chromium is not installed (apt-get install chromium): no screenshot of the trace")
    browser = [CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
               "--window-size=1400,900", "--virtual-time-budget=15000"]
    # The link `lessor dev` printed opens on the latest traces, the lease's among them (not an empty search).
    listed = await asyncio.to_thread(subprocess.run, [*browser, "--dump-dom", search.group(1)],
                                     capture_output=True, text=True, timeout=scaled(120))
    assert re.search(r"receive lease", listed.stdout, re.IGNORECASE), listed.stdout[-2000:]
    png = tmp_path / "zipkin-lease-trace.png"
    shot = await asyncio.to_thread(subprocess.run, [*browser, f"--screenshot={png}", url],
                                   capture_output=True, text=True, timeout=scaled(120))
    assert png.is_file(), shot.stderr
    print(f"screenshot of {url}: {png}")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    # What the screenshot shows, from the same page's rendered DOM: the trace's spans by name.
    dom = await asyncio.to_thread(subprocess.run, [*browser, "--dump-dom", url],
                                  capture_output=True, text=True, timeout=scaled(120))
    assert re.search(r"receive lease", dom.stdout, re.IGNORECASE) and "patch exporter" in dom.stdout.lower(), \
        dom.stdout[-2000:]
