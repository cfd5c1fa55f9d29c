"""Tokens, names and selectors of Jumpstarter's protocol, and lessor without the [jumpstarter] extra."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path

import pytest

from lessor.jumpstarter.names import parse_parent, parse_resource, resource, selector_from_text
from lessor.jumpstarter.tokens import InvalidToken, Subject, load_key, mint, new_key_pem, verify
from lessor.model.selectors import parse_selector

KEY = load_key(new_key_pem())
ALICE = Subject("client", "lab", "alice", "0b6e-uid")


def test_a_minted_token_verifies_to_its_subject() -> None:
    assert verify(KEY.public_key(), mint(KEY, ALICE)) == ALICE


@pytest.mark.parametrize("tamper, reason", [
    (lambda t: mint(load_key(new_key_pem()), ALICE), "signature is not lessor's"),
    (lambda t: t.rsplit(".", 1)[0] + "." + base64.urlsafe_b64encode(b"x" * 64).decode().rstrip("="), "signature"),
    (lambda t: ".".join([t.split(".")[0], base64.urlsafe_b64encode(json.dumps(
        {"iss": "lessor", "aud": "jumpstarter", "sub": "client:lab:mallory:1"}).encode()).decode().rstrip("="),
        t.split(".")[2]]), "signature"),
    (lambda t: "abc", "not a JWT"),
    (lambda t: "a.b.c", "not base64url"),
    (lambda t: "a.b.YWJj", "not an ES256 JWT"),
    (lambda t: "[" * 5000, "more than"),
])
def test_a_token_not_signed_by_lessor_for_its_claims_is_refused(tamper: object, reason: str) -> None:
    token = tamper(mint(KEY, ALICE))  # type: ignore[operator]
    with pytest.raises(InvalidToken, match=reason):
        verify(KEY.public_key(), token)


def test_a_subject_must_be_kind_namespace_name_uid() -> None:
    with pytest.raises(InvalidToken, match="client|exporter:NAMESPACE:NAME:UID"):
        Subject.parse("lease:lab:x:1")
    assert str(Subject.parse("exporter:lab:board-1:u")) == "exporter:lab:board-1:u"


def test_names_as_the_tools_spell_them() -> None:
    assert resource("lab", "leases", "l1") == "namespaces/lab/leases/l1"
    assert parse_resource("namespaces/lab/leases/l1", "leases") == ("lab", "l1")
    assert parse_parent("namespaces/lab") == "lab"
    with pytest.raises(ValueError, match="namespaces/NAMESPACE/leases/NAME"):
        parse_resource("namespaces/lab/exporters/e1", "leases")
    with pytest.raises(ValueError, match="namespaces/NAMESPACE"):
        parse_parent("lab")


def test_selectors_in_kubectl_syntax_become_label_selectors_that_match_as_kubectl_does() -> None:
    raw = selector_from_text("board=rpi4, zone in (a, b),tier!=dev,!broken,gpu")
    assert raw == {"matchLabels": {"board": "rpi4"}, "matchExpressions": [
        {"key": "zone", "operator": "In", "values": ["a", "b"]},
        {"key": "tier", "operator": "NotIn", "values": ["dev"]},
        {"key": "broken", "operator": "DoesNotExist"},
        {"key": "gpu", "operator": "Exists"}]}
    selector = parse_selector(raw)
    assert selector.matches({"board": "rpi4", "zone": "a", "gpu": "1"})
    assert not selector.matches({"board": "rpi4", "zone": "a", "gpu": "1", "broken": "yes"})
    assert selector_from_text("a==b") == {"matchLabels": {"a": "b"}}
    with pytest.raises(ValueError, match="needs at least one value"):
        selector_from_text("zone in ()")
    with pytest.raises(ValueError, match="is not key=value"):
        selector_from_text("zone >< 3")


# The installed `lessor` with grpc and the protocol stubs unimportable, as in an install without the extra.
WITHOUT_GRPC = ("import sys; sys.modules['grpc'] = None; sys.modules['jumpstarter_protocol'] = None; "
                "from lessor.cli import main; import lessor.app.operator; sys.exit(main(sys.argv[1:]))")


def without_grpc(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", WITHOUT_GRPC, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=60)


def test_lessor_runs_without_the_extra_and_grpc_port_names_it(tmp_path: Path) -> None:
    out = without_grpc("run", "--help", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "--grpc-port" in out.stdout
    out = without_grpc("run", "--grpc-port", "8082", "--kubeconfig", str(tmp_path / "absent"), cwd=tmp_path)
    assert out.returncode == 1, out.stderr
    assert "lessor[jumpstarter]" in out.stderr and "Traceback" not in out.stderr


def test_the_operator_does_not_import_grpc_unless_the_port_is_enabled(tmp_path: Path) -> None:
    code = "import sys, lessor.cli, lessor.app.operator; print('grpc' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "False", out.stderr


def test_bench_grpc_without_the_extra_names_it_before_starting_anything(tmp_path: Path) -> None:
    out = without_grpc("bench", "grpc", "--help", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "--frame-kib" in out.stdout
    out = without_grpc("bench", "grpc", "--leases", "1", cwd=tmp_path)
    assert out.returncode == 1, out.stderr
    assert "lessor[jumpstarter]" in out.stderr and "Traceback" not in out.stderr and "started" not in out.stderr
