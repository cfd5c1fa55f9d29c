"""The development CA of `lessor run --grpc-port` without `--grpc-cert-dir`: one CA, kept and reused."""

from __future__ import annotations

from pathlib import Path

import pytest
from cryptography import x509

from lessor.jumpstarter.server import server_credentials
from lessor.jumpstarter.settings import GrpcSettings, development_ca_dir


def _start(tmp_path: Path, out: str) -> bytes:
    """What one start of the server tells its clients to trust (`--grpc-ca-out`)."""
    server_credentials(GrpcSettings(port=0, endpoint="localhost:0", ca_dir=tmp_path / "ca", ca_out=tmp_path / out))
    return (tmp_path / out).read_bytes()


def test_every_start_serves_with_the_same_kept_ca(tmp_path: Path) -> None:
    """Configs written with the first start's CA (`lessor credentials --ca-file`) still verify after a restart:
    a new CA at every start was BAD_SIGNATURE for every client and exporter."""
    first, second = _start(tmp_path, "first.pem"), _start(tmp_path, "second.pem")
    assert first == second
    assert (tmp_path / "ca" / "ca.crt").read_bytes() == first
    assert (tmp_path / "ca" / "ca.key").stat().st_mode & 0o077 == 0


def test_an_unreadable_kept_ca_is_made_anew(tmp_path: Path) -> None:
    first = _start(tmp_path, "first.pem")
    (tmp_path / "ca" / "ca.key").write_text("not a key")
    second = _start(tmp_path, "second.pem")
    assert second != first
    x509.load_pem_x509_certificate(second)
    assert _start(tmp_path, "third.pem") == second


def test_the_default_home_is_the_users_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert development_ca_dir() == tmp_path / "lessor" / "grpc-ca"
