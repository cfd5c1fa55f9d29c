"""`lessor dev --traces`: Zipkin, a trace viewer with a web UI, next to the development operator.

Zipkin's server is one executable jar on Maven Central with its UI (Lens) inside, so it is fetched
by Maven like any library and run by the machine's Java (17 or newer): no image and no release
download. Jaeger's Go module was the first choice, but its UI is built from a separate repository
and the module embeds only a placeholder page. The jar is cached under the user's cache folder;
Zipkin keeps spans in memory, listens on loopback only and takes the operator's spans in its own
JSON format (`OTEL_TRACES_EXPORTER=zipkin`).
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote

from lessor.tools.controlplane.build import user_cache
from lessor.tools.controlplane.processes import Child

ZIPKIN_VERSION = "3.4.2"
ARTIFACT = f"io.zipkin:zipkin-server:{ZIPKIN_VERSION}:jar:exec"
JAR_NAME = f"zipkin-server-{ZIPKIN_VERSION}-exec.jar"
INSTALL_HINT = ("lessor dev --traces runs Zipkin's server with Java 17 or newer and fetches it with Maven, "
                "and {missing} is not on PATH: install it (Debian, Ubuntu: `apt-get install {package}`)")


def find_java() -> str:
    """The `java` binary, or a RuntimeError that says how to install it."""
    found = shutil.which("java")
    if found is None:
        raise RuntimeError(INSTALL_HINT.format(missing="java", package="default-jre-headless"))
    return found


def ensure_zipkin(progress: Callable[[str], None]) -> Path:
    """The cached server jar; fetched from Maven Central by `mvn` on first use (86 MB, once)."""
    jar = user_cache("zipkin") / JAR_NAME
    if jar.is_file():
        return jar
    mvn = shutil.which("mvn")
    if mvn is None:
        raise RuntimeError(INSTALL_HINT.format(missing="mvn", package="maven"))
    jar.parent.mkdir(parents=True, exist_ok=True)
    progress(f"fetching Zipkin {ZIPKIN_VERSION} ({ARTIFACT}) with Maven into {jar.parent} (once)")
    fetched = subprocess.run(
        [mvn, "-q", "-B", "dependency:copy", f"-Dartifact={ARTIFACT}", f"-DoutputDirectory={jar.parent}"],
        capture_output=True, text=True, cwd=jar.parent, check=False)
    if fetched.returncode != 0 or not jar.is_file():
        tail = "\n".join((fetched.stdout + fetched.stderr).splitlines()[-15:])
        raise RuntimeError(f"could not fetch {ARTIFACT} with Maven (exit code {fetched.returncode}):\n{tail}")
    return jar


def zipkin_child(java: str, jar: Path, folder: Path, port: int) -> Child:
    """Zipkin on 127.0.0.1:`port`: the UI under /zipkin/, spans posted to /api/v2/spans."""
    folder.mkdir(parents=True, exist_ok=True)
    return Child("zipkin", [
        java, "-Xmx512m", "-XX:+UseSerialGC", "-jar", str(jar),
        f"--armeria.ports[0].port={port}", "--armeria.ports[0].ip=127.0.0.1",
        "--armeria.ports[0].protocols[0]=http", "--logging.level.root=WARN",
    ], folder / "zipkin.log")


def spans_endpoint(port: int) -> str:
    return f"http://127.0.0.1:{port}/api/v2/spans"


def search_url(port: int, service: str = "lessor") -> str:
    """Zipkin's search page, listing the operator's recent traces."""
    return f"http://127.0.0.1:{port}/zipkin/?serviceName={quote(service)}"


def trace_url(port: int, trace_id: str) -> str:
    return f"http://127.0.0.1:{port}/zipkin/traces/{trace_id}"
