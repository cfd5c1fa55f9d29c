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
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlencode

from lessor.tools.controlplane.build import user_cache
from lessor.tools.controlplane.processes import Child
from lessor.telemetry.tracefile import zipkin_trace_url

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


SEARCH_BACK = 3600.0  # s: the traces of `lessor dev`'s start, before the link is printed
SEARCH_AHEAD = 7 * 86400.0  # s: and those of the week after
SEARCH_LIMIT = 50


def search_url(port: int, now: float | None = None, service: str = "lessor") -> str:
    """Zipkin's search page showing the operator's latest traces (the newest first) as it opens. Lens searches
    on opening only when the URL has a time range and a limit besides the criteria (else it shows an empty
    "Search Traces" page); the range, from an hour before `now` to a week after, covers the whole session."""
    now = time.time() if now is None else now
    query = urlencode({"serviceName": service, "lookback": "range", "startTs": int((now - SEARCH_BACK) * 1000),
                       "endTs": int((now + SEARCH_AHEAD) * 1000), "limit": SEARCH_LIMIT})
    return f"http://127.0.0.1:{port}/zipkin/?{query}"


trace_url = zipkin_trace_url
