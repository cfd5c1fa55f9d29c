"""`make` is quiet: building the package prints no setuptools warnings (the license table, package data
folders missing from `packages`), and the wheel carries every data file lessor reads at run time."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

from tests.slowness import scaled

ROOT = Path(__file__).resolve().parents[2]


def test_the_package_builds_without_warnings_and_carries_its_data(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--disable-pip-version-check",
                          "--wheel-dir", str(tmp_path), "--verbose", str(ROOT)],
                         cwd=tmp_path, capture_output=True, text=True, timeout=scaled(300))
    assert out.returncode == 0, out.stderr
    said = out.stdout + out.stderr
    for warning in ("Warning", "deprecated", "is absent from the `packages` configuration"):
        assert warning not in said, said[said.find(warning) - 500:said.find(warning) + 500]
    (wheel,) = tmp_path.glob("lessor-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for data in ("lessor/crds/leases.yaml", "lessor/deploy/samples/40-leases.yaml",
                 "lessor/deploy/monitoring/grafana-dashboard.json", "lessor/deploy/monitoring/servicemonitor.yaml",
                 "lessor/deploy/grpc/certificate.yaml", "lessor/deploy/grpc/ingress.yaml", "lessor/deploy/grpc/route.yaml"):
        assert data in names, data
