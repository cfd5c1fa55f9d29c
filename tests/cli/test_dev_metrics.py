"""`lessor dev --metrics`: a real Prometheus scraping the operator, the graph URL printed, and a
headless browser's screenshot of that graph (kept as a test artefact under pytest's tmp dir)."""

from __future__ import annotations

import asyncio
import json
import os
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

import pytest

from lessor.tools.controlplane import ControlPlane
from lessor.tools.controlplane.processes import free_port
from tests.slowness import scaled

PROMETHEUS = shutil.which("prometheus")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def _lessor() -> str:
    return shutil.which("lessor") or str(Path(sys.executable).parent / "lessor")


def test_without_prometheus_dev_metrics_says_how_to_install_it(tmp_path: Path) -> None:
    out = subprocess.run([_lessor(), "dev", "--metrics", "--dir", str(tmp_path / "dev"),
                          "--health-port", str(free_port()), "--metrics-port", str(free_port()),
                          "--webhook-port", str(free_port()), "--prometheus-port", str(free_port())],
                         cwd=tmp_path, capture_output=True, text=True, timeout=scaled(60),
                         env={**os.environ, "PATH": str(tmp_path)})  # no prometheus there
    assert out.returncode == 1, out.stderr
    assert "apt-get install prometheus" in out.stderr and "Traceback" not in out.stderr
    assert "control plane" not in out.stderr  # refused before starting anything


@dataclass
class DevWithMetrics:
    process: subprocess.Popen[str]
    output: list[str]
    graph: str  # the URL `lessor dev` printed
    prometheus: str  # http://127.0.0.1:PORT


def _query(base: str, expr: str) -> list[dict[str, object]]:
    url = f"{base}/api/v1/query?{urllib.parse.urlencode({'query': expr})}"
    with urllib.request.urlopen(url, timeout=scaled(5)) as resp:
        return json.loads(resp.read())["data"]["result"]


@pytest.fixture(scope="module")
async def dev_metrics(controlplane: ControlPlane, tmp_path_factory: pytest.TempPathFactory,
                      read_until: Callable[..., Awaitable[str]]) -> AsyncIterator[DevWithMetrics]:
    if PROMETHEUS is None:
        pytest.skip("prometheus is not installed (apt-get install prometheus)")
    folder = tmp_path_factory.mktemp("dev-metrics")
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "lessor", "dev", "--metrics", "--dir", str(folder / "dev"),
         "--kubeconfig-out", str(folder / "dev.kubeconfig"), "--health-port", str(free_port()),
         "--metrics-port", str(free_port()), "--webhook-port", str(free_port()), "--prometheus-port", str(port)],
        cwd=folder, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    try:
        graph = re.search(r"open (http://127\.0\.0\.1:\d+/graph\?\S+)",
                          await read_until(proc, "Ctrl-C stops everything", lines))
        assert graph, "".join(lines)
        yield DevWithMetrics(proc, lines, graph.group(1), f"http://127.0.0.1:{port}")
    finally:
        proc.send_signal(signal.SIGINT)
        _, rest = await asyncio.to_thread(proc.communicate, timeout=scaled(60))
        lines.append(rest or "")
    assert proc.returncode == 0, "".join(lines)
    assert "stopped Prometheus" in "".join(lines)


async def test_dev_metrics_runs_prometheus_scraping_the_operator(dev_metrics: DevWithMetrics) -> None:
    output = "".join(dev_metrics.output)
    assert f"Prometheus on {dev_metrics.prometheus}" in output
    deadline = time.monotonic() + scaled(60)
    while True:  # the samples' leases, by state, as the printed graph shows them
        states = {r["metric"]["state"] for r in await asyncio.to_thread(  # type: ignore[index]
            _query, dev_metrics.prometheus, "sum by (state) (lessor_leases)")}
        if {"ready", "ended"} <= states:
            break
        assert time.monotonic() < deadline, f"Prometheus has lessor_leases by state {states}"
        await asyncio.sleep(1)
    up = await asyncio.to_thread(_query, dev_metrics.prometheus, 'up{job="lessor"}')
    assert [r["value"][1] for r in up] == ["1"], up  # type: ignore[index]


async def test_a_headless_browser_shows_the_graph(dev_metrics: DevWithMetrics, tmp_path: Path) -> None:
    if CHROMIUM is None:
        pytest.skip("chromium is not installed (apt-get install chromium): no screenshot")
    deadline = time.monotonic() + scaled(60)
    while len(await asyncio.to_thread(_query, dev_metrics.prometheus, "lessor_leases[30s]")) == 0 or \
            not await asyncio.to_thread(_query, dev_metrics.prometheus, "count_over_time(lessor_leader[1m]) > 1"):
        assert time.monotonic() < deadline, "Prometheus never had two scrapes"
        await asyncio.sleep(1)
    browser = [CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
               "--window-size=1400,900", "--virtual-time-budget=15000"]
    png = tmp_path / "prometheus-graph.png"
    shot = await asyncio.to_thread(subprocess.run, [*browser, f"--screenshot={png}", dev_metrics.graph],
                                   capture_output=True, text=True, timeout=scaled(120))
    assert png.is_file(), shot.stderr
    print(f"screenshot of {dev_metrics.graph}: {png}")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    # What the screenshot shows, read from the same page's rendered DOM: the graph's legend has a
    # line per lease state, which the page only draws once the query returned series.
    dom = await asyncio.to_thread(subprocess.run, [*browser, "--dump-dom", dev_metrics.graph],
                                  capture_output=True, text=True, timeout=scaled(120))
    legend = re.findall(r'\{state=(?:&quot;|")(\w+)(?:&quot;|")\}', dom.stdout)
    assert {"ready", "ended"} <= set(legend), dom.stdout[-2000:]
