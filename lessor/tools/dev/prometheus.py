"""`lessor dev --metrics`: a real Prometheus scraping the development operator.

lessor does not build or download Prometheus: it runs the one on PATH (Debian and Ubuntu package
it: `apt-get install prometheus`), with a configuration and a data folder of its own under the dev
folder, listening on loopback only.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from urllib.parse import urlencode

import yaml

from lessor.tools.controlplane.processes import Child

INSTALL_HINT = ("lessor dev --metrics runs Prometheus from PATH, and there is none: install it with "
                "`apt-get install prometheus` (Debian, Ubuntu), or put a `prometheus` binary on PATH")
SCRAPE_SECONDS = 5
# What the printed link graphs: every lease by state.
FIRST_GRAPH = "sum by (state) (lessor_leases)"


def find_prometheus() -> str:
    """The Prometheus binary, or a RuntimeError that says how to install it."""
    found = shutil.which("prometheus")
    if found is None:
        raise RuntimeError(INSTALL_HINT)
    return found


def graph_url(port: int, expr: str = FIRST_GRAPH, minutes: int = 5) -> str:
    """Prometheus' graph page showing `expr` over the last minutes."""
    query = urlencode({"g0.expr": expr, "g0.tab": "0", "g0.range_input": f"{minutes}m"})
    return f"http://127.0.0.1:{port}/graph?{query}"


def prometheus_child(binary: str, folder: Path, port: int, metrics_port: int) -> Child:
    """Prometheus scraping 127.0.0.1:`metrics_port` every few seconds; its files go to `folder`."""
    (folder / "data").mkdir(parents=True, exist_ok=True)
    config = folder / "prometheus.yml"
    config.write_text(yaml.safe_dump({
        "global": {"scrape_interval": f"{SCRAPE_SECONDS}s", "evaluation_interval": f"{SCRAPE_SECONDS}s"},
        "scrape_configs": [{"job_name": "lessor", "static_configs": [
            {"targets": [f"127.0.0.1:{metrics_port}"], "labels": {"instance": "lessor-dev"}}]}],
    }, sort_keys=False))
    return Child("prometheus", [
        binary, f"--config.file={config}", f"--storage.tsdb.path={folder / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=2d",
    ], folder / "prometheus.log")
