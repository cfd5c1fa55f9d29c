"""`lessor bench fuzz` needs Hypothesis, an extra: without it the command's help still works, and a run stops at
once (before any control plane) with a message naming the extra."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

# The installed `lessor` with Hypothesis made unimportable, as in an install without the extra.
WITHOUT_HYPOTHESIS = "import sys; sys.modules['hypothesis'] = None; from lessor.cli import main; sys.exit(main(sys.argv[1:]))"


def lessor_without_hypothesis(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", WITHOUT_HYPOTHESIS, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=60)


def test_bench_fuzz_help_needs_no_hypothesis(tmp_path: Path) -> None:
    out = lessor_without_hypothesis("bench", "fuzz", "--help", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "usage: lessor bench fuzz" in out.stdout


def test_bench_fuzz_without_hypothesis_names_the_extra(tmp_path: Path) -> None:
    out = lessor_without_hypothesis("bench", "fuzz", "--kubeconfig", str(tmp_path / "absent"), cwd=tmp_path)
    assert out.returncode == 1, out.stderr
    assert "lessor[bench]" in out.stderr and "Hypothesis" in out.stderr, out.stderr
    assert "Traceback" not in out.stderr and not (tmp_path / "absent").exists()
