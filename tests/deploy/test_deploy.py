"""deploy/ as a cluster operator applies it (a kustomization), and the Containerfile that makes the image.

Neither the image nor a pod can be built or run here (no container runtime);
tests/deploy/test_pod.py runs the container's command as the pod would.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import re
import shutil
import sys
import tomllib
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from lessor.shipped import manifests
from lessor.tools.controlplane import ControlPlane
from lessor.gateway import Gateway, Resource
from tests.slowness import scaled

ROOT = Path(__file__).resolve().parents[2]
CONTAINERFILE = ROOT / "Containerfile"


def deploy_dir() -> Path:
    """deploy/ as the package installs it (lessor.deploy): what users of the wheel get."""
    folder = resources.files("lessor.deploy")
    assert isinstance(folder, Path)
    return folder


def documents(name: str) -> list[dict[str, Any]]:
    return list(manifests.load_documents([(deploy_dir() / name).read_text()]))


def kustomization() -> dict[str, Any]:
    return documents("kustomization.yaml")[0]


def deployment() -> dict[str, Any]:
    return next(d for d in documents("deployment.yaml") if d["kind"] == "Deployment")


def test_the_kustomization_holds_every_manifest_but_the_samples() -> None:
    listed = kustomization()["resources"]
    shipped = sorted(p.name for p in deploy_dir().glob("*.yaml") if p.name != "kustomization.yaml")
    assert sorted(listed) == shipped
    assert not any(r.startswith("samples") for r in listed)


def test_two_replicas_and_a_budget_that_keeps_one() -> None:
    pdb = documents("pdb.yaml")[0]
    dep = deployment()
    template_labels = dep["spec"]["template"]["metadata"]["labels"]
    assert pdb["spec"]["selector"]["matchLabels"].items() <= template_labels.items()
    assert pdb["metadata"]["namespace"] == dep["metadata"]["namespace"]
    assert dep["spec"]["replicas"] == 2 and pdb["spec"]["minAvailable"] == 1


async def test_kubectl_apply_k_passes_a_server_dry_run(controlplane: ControlPlane, kube: Gateway) -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed: `kubectl apply -k deploy/ --dry-run=server` cannot be tried")
    proc = await asyncio.create_subprocess_exec(
        kubectl, "--kubeconfig", str(controlplane.kubeconfig), "apply", "-k", str(deploy_dir()),
        "--dry-run=server", stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), scaled(120))
    assert proc.returncode == 0, err.decode()
    applied = {line.split(" ", 1)[0] for line in out.decode().splitlines() if line.endswith("(server dry run)")}
    expected = {f"{d['kind'].lower()}.{_group(d)}/{d['metadata']['name']}".replace("./", "/")
                for name in kustomization()["resources"] for d in documents(name)}
    assert applied == expected, out.decode()


def _group(doc: dict[str, Any]) -> str:
    api_version = doc["apiVersion"]
    return api_version.rsplit("/", 1)[0] if "/" in api_version else ""


# --- the Containerfile ------------------------------------------------------------------------------


def stages() -> list[list[tuple[str, str]]]:
    """The Containerfile's stages, each a list of (INSTRUCTION, arguments), continuation lines joined."""
    text = re.sub(r"\\\n\s*", " ", CONTAINERFILE.read_text())
    result: list[list[tuple[str, str]]] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        instruction, _, args = line.partition(" ")
        if instruction.upper() == "FROM":
            result.append([])
        if result:
            result[-1].append((instruction.upper(), args.strip()))
    return result


def test_the_image_runs_as_the_deployments_non_root_user() -> None:
    final = stages()[-1]
    users = [args for instruction, args in final if instruction == "USER"]
    assert users, "the final stage sets no USER: it would run as root"
    user, _, group = users[-1].partition(":")
    context = deployment()["spec"]["template"]["spec"]["securityContext"]
    assert int(user) != 0 and int(user) == context["runAsUser"]
    assert group and int(group) == context["runAsGroup"]
    # Nothing after USER needs root, and nothing reaches into root's home.
    after = final[final.index(("USER", users[-1])) + 1:]
    assert not [i for i, _ in after if i in ("RUN", "COPY", "ADD")], after
    assert "/root" not in CONTAINERFILE.read_text() and "~" not in CONTAINERFILE.read_text()


def test_the_image_is_slim_python_with_the_package_installed_by_pip() -> None:
    build, final = stages()[0], stages()[-1]
    assert re.fullmatch(r"python:\S+-slim(\s+AS\s+\w+)?", build[0][1], re.I), build[0]
    assert re.fullmatch(r"python:\S+-slim", final[0][1]), final[0]
    assert any(i == "RUN" and re.search(r"\bpip wheel\b.* \.$", a) for i, a in build), build
    assert any(i == "RUN" and re.search(r"\bpip install\b.*\.whl", a) for i, a in final), final
    # The wheel is built from every folder pyproject.toml maps into the package.
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    copied = {a.split()[0].rstrip("/") for i, a in build if i == "COPY" and not a.startswith("--from")}
    folders = set(pyproject["tool"]["setuptools"]["package-dir"].values())
    assert folders <= copied, folders - copied
    assert {"pyproject.toml", pyproject["project"]["readme"]} <= {
        f for i, a in build if i == "COPY" for f in a.split()[:-1]}


def test_the_image_ships_the_python_the_suite_runs_on() -> None:
    """.ci/run runs the suite on the Containerfile's Python (and the dev venv is 3.11 too): what is tested is what
    ships. Other Pythons run the mailbox's tests only (the fast lane's asyncio internals, `mailbox/loops.py`)."""
    args = re.findall(r"^ARG (\S+)", CONTAINERFILE.read_text(), re.M)
    assert f"PYTHON={sys.version_info.major}.{sys.version_info.minor}" in args, args
    assert all(a.startswith("python:${PYTHON}-") for stage in stages() for i, a in stage if i == "FROM"), stages()
    assert "sed -n 's/^ARG PYTHON=//p' Containerfile" in (ROOT / ".ci" / "run").read_text()


def test_the_entrypoint_is_the_console_script_the_deployment_runs() -> None:
    final = stages()[-1]
    entrypoint = [a for i, a in final if i == "ENTRYPOINT"]
    assert entrypoint and entrypoint[-1] == '["lessor"]', entrypoint
    command = deployment()["spec"]["template"]["spec"]["containers"][0]["command"]
    scripts = {ep.name: ep for ep in importlib.metadata.distribution("lessor").entry_points
               if ep.group == "console_scripts"}
    assert command[0] in scripts, f"{command[0]} is not a console script of the installed package"
    assert callable(scripts[command[0]].load())
    from lessor.cli import build_parser

    build_parser().parse_args(command[1:])  # the deployment's arguments are ones `lessor` accepts


def test_the_image_has_the_jumpstarter_extra_when_the_deployment_serves_grpc() -> None:
    """`lessor run --grpc-port` needs grpcio and the protocol's stubs, which only the [jumpstarter] extra brings:
    an image without them would crash-loop on the deployment's command."""
    command = deployment()["spec"]["template"]["spec"]["containers"][0]["command"]
    installs = [a for i, a in stages()[-1] if i == "RUN" and re.search(r"\bpip install\b", a)]
    assert "--grpc-port" in command
    assert any("[jumpstarter]" in a for a in installs), installs


def _grpc_examples() -> dict[str, dict[str, Any]]:
    return {doc["kind"]: doc for name in ("certificate.yaml", "ingress.yaml", "route.yaml")
            for doc in manifests.load_documents([(deploy_dir() / "grpc" / name).read_text()])}


async def test_the_grpc_way_in_names_what_the_deployment_serves(kube: Gateway, namespace: str) -> None:
    """deploy/grpc/: the Certificate names the endpoint the Deployment writes into credentials and the hosts the
    Ingress and Route route by SNI; both reach the Service's grpc port with TLS passed through; and the API server
    takes the Ingress as written (the other two are CRDs that this control plane lacks)."""
    examples = _grpc_examples()
    certificate, ingress, route = examples["Certificate"], examples["Ingress"], examples["Route"]
    dep = deployment()
    args = dep["spec"]["template"]["spec"]["containers"][0]["command"]
    endpoint_host = args[args.index("--grpc-endpoint") + 1].rpartition(":")[0]
    volumes = {v["name"]: v for v in dep["spec"]["template"]["spec"]["volumes"]}
    assert certificate["spec"]["secretName"] == volumes["grpc-cert"]["secret"]["secretName"]
    hosts = {rule["host"] for rule in ingress["spec"]["rules"]} | {route["spec"]["host"]}
    assert {endpoint_host, *hosts} <= set(certificate["spec"]["dnsNames"])
    service = next(d for d in documents("service.yaml") if d["metadata"]["name"] == "lessor-grpc")
    ports = {p["name"] for p in service["spec"]["ports"]}
    backend = ingress["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]
    assert (backend["name"], backend["port"]["name"]) == ("lessor-grpc", "grpc") and "grpc" in ports
    assert (route["spec"]["to"]["name"], route["spec"]["port"]["targetPort"]) == ("lessor-grpc", "grpc")
    assert ingress["metadata"]["annotations"]["nginx.ingress.kubernetes.io/ssl-passthrough"] == "true"
    assert route["spec"]["tls"]["termination"] == "passthrough"
    ingresses = Resource("networking.k8s.io", "v1", "Ingress", "ingresses")
    created = await kube.create(ingresses, namespace, {**ingress, "metadata": {
        **ingress["metadata"], "namespace": namespace}})
    assert created["spec"]["rules"] == ingress["spec"]["rules"]
