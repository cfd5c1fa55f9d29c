"""The `lessor` command line (DESIGN.md section 4)."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import logging
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import orjson

from lessor import __version__

BENCHMARKS = {
    "admission": "admission latency p50/p99 of a ResourceClaim with ten checks, at 1 and 50 concurrent requests; "
                 "a hostile mix of reviews at 50 concurrent, against the deadline",
    "failover": "issue 27's attack: 3 replicas, each its own ServiceAccount, during a lease storm with churn on "
    "a slow node (CPU hogs, or each replica under --cpu-limit), the leader SIGKILLed, SIGSTOPped past its lease, "
    "or the replicas rolled; from a watch history and the audit log: double bookings, late writes of deposed "
    "leaders, stranded objects, priority inversions, writes per grant, failover p50/max, next to the targets",
    "faults": "the API server's bad minutes (issue 42) during a lease storm: kube-apiserver SIGKILLed and started "
              "again (--mode apikill), the same with etcd compacted meanwhile (compact), or throttling 429s under a "
              "neighbour's flood (overload); convergence after the fault, retries by reason, failed watches, actor "
              "restarts, tracebacks, double grants and stale references",
    "claims": "a claim storm (a pool with minAvailable 100, then 500 claims at once) against the API server's ceiling",
    "fuzz": "hostile bodies of all nine kinds through the API server, with and without the webhook: "
            "refusals by layer, tracebacks, crash restarts (ResourcePoolScaling has no verdict condition)",
    "apiserver": "the local API server's write ceiling (status patches/s at 1, 8, 64 writers, creates/s, watch latency)",
    "leases": "a lease storm (1,000 exporters, 2,000 leases, 20 clients, 3 policies) against the API server's ceiling, "
              "with another tenant's canary lease timed alone and in the storm, beside its API requests without lessor",
    "scale": "the operator as the cluster grows (--sizes 1000,10000): start-up requests, settle time, worst "
    "/healthz latency, RSS per exporter, a 200-lease burst, SIGTERM time, the API server's ceiling",
    "mailbox": "the actor runtime: tell throughput vs a bare asyncio.Queue hop, ask latency, memory per idle actor",
    "topology": "the topology: selector queries at 100k exporters and 1k policies, build time from 50k objects",
    "templates": "the template budget: a provider override rendered in a plain sandbox, budgeted, and offloaded",
    "grpc": "Jumpstarter's protocol on `lessor run --grpc-port`: CreateLease to Ready over gRPC, and the router's "
            "MB/s and added latency per frame against a direct TCP copy in the same run; --hostile: what a hostile caller "
            "can send, with the codes, log lines, RSS and another client's latency (needs the [jumpstarter] extra)",
}


def _say(line: str) -> None:
    print(f"lessor: {line}", file=sys.stderr, flush=True)


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The whole command line. A benchmark's own arguments come from its module, imported only for the
    benchmark that `argv` names (`lessor bench scale ...`): importing all ten costs a second of start-up."""
    parser = argparse.ArgumentParser(
        prog="lessor",
        description="Lease devices (Exporters) to Clients and bind provisioned environments "
        "(ResourceHandles) to ResourceClaims: a Kubernetes operator built as an asyncio actor system.",
    )
    parser.add_argument("--version", action="version", version=f"lessor {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug output")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    cp = sub.add_parser(
        "controlplane", help="run a local etcd + kube-apiserver on loopback",
        description="Start a local etcd and kube-apiserver (and kube-controller-manager) on loopback, "
        "built from Go modules and cached under ~/.cache/lessor on first use (several minutes once). "
        "Writes DIR/kubeconfig once the API server is ready and runs until interrupted. "
        "Set LESSOR_CONTROLPLANE_BIN=dir to use existing binaries.",
    )
    cp.add_argument("--dir", type=Path, default=Path(".lessor/controlplane"),
                    help="where certificates, etcd data, logs and the kubeconfig go (default: %(default)s)")
    cp.add_argument("--no-controller-manager", action="store_true",
                    help="do not run kube-controller-manager (no garbage collection, no namespace deletion)")

    inst = sub.add_parser(
        "install", help="apply the CRDs, create the operator's namespace and install the leader fence",
        description="Apply lessor's CustomResourceDefinitions with server-side apply, wait until they "
        "are Established, create the operator's namespace, and apply the leader fence (deploy/leader-fence.yaml: "
        "a ValidatingAdmissionPolicy by which the API server admits writes of lessor's ServiceAccounts only "
        "from the holder of the leader Lease; Kubernetes 1.30 or later).",
    )
    _kube_args(inst)
    inst.add_argument("--leader-elect", action=argparse.BooleanOptionalAction, default=True,
                      help="the replicas elect a leader (lessor run's default): install the leader fence; "
                      "--no-leader-elect for a single `lessor run --no-leader-elect`: remove it (default: elect)")

    run = sub.add_parser(
        "run", help="run the operator",
        description="Run the operator: watch every lessor kind and serve /healthz (fails while the event "
        "loop lags) and /readyz (ready once the caches synced, unready while the API server does not "
        "answer) on the health port, Prometheus metrics on /metrics, and the preflight admission "
        "webhook over HTTPS. Replicas elect a leader on the coordination.k8s.io Lease lessor-leader in "
        "the operator namespace: every replica watches and serves the webhook, only the leader runs the "
        "actors and writes; SIGTERM hands the leadership over at once. "
        "Uses the in-cluster service account when no kubeconfig is given.",
    )
    _kube_args(run)
    _run_args(run)
    _webhook_args(run)
    _grpc_args(run)

    cred = sub.add_parser(
        "credentials", help="write the config that Jumpstarter's jmp tools read for a Client or an Exporter",
        description="Print (or write to --output) the ClientConfig or ExporterConfig (jumpstarter.dev/v1alpha1) "
        "of a Client or an Exporter: the gRPC endpoint, the TLS trust and the token from the Secret named by its "
        "status.credential, which lessor keeps while `lessor run --grpc-port` serves Jumpstarter's protocol. "
        "Use it with `jmp --client-config FILE` or `jmp run --exporter-config FILE` (an exporter's drivers go "
        "under `export:`). See docs/jumpstarter-grpc.md.",
    )
    cred.add_argument("kind", choices=("client", "exporter", "rotate-key"),
                      help="a Client (for jmp) or an Exporter (for jmp run); rotate-key: replace the signing key in "
                      "the operator namespace and have the running operator mint every credential again (old tokens "
                      "are refused from then on)")
    cred.add_argument("name", nargs="?", help="the Client's or Exporter's name")
    cred.add_argument("--operator-namespace", default="lessor-system",
                      help="with rotate-key: where the signing key is (default: %(default)s)")
    cred.add_argument("-n", "--namespace", default="default", help="its namespace (default: %(default)s)")
    cred.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster config, else $KUBECONFIG, else "
                      "~/.kube/config)")
    cred.add_argument("--endpoint", metavar="HOST:PORT",
                      help="the endpoint the tools dial (default: the object's status.endpoint)")
    cred.add_argument("--ca-file", type=Path, metavar="PEM",
                      help="trust this CA for the endpoint's certificate (embedded as tls.ca; default: the "
                      "system's trust store)")
    cred.add_argument("--insecure", action="store_true",
                      help="tls.insecure: the tools trust whatever certificate the endpoint presents (it must "
                      "still name the endpoint's host)")
    cred.add_argument("-o", "--output", type=Path, metavar="FILE", help="write here instead of standard output")

    dev = sub.add_parser(
        "dev", help="control plane + CRDs + operator + samples, in one process tree",
        description="Start a local control plane, install the CRDs, run the operator and apply the "
        "samples from deploy/samples/ (keeping the sample exporters' heartbeats fresh). "
        "Prints how to use kubectl against it; Ctrl-C stops everything and says what it cleaned up. "
        "One lessor dev per --dir: a second one in the same folder is refused.",
    )
    dev.add_argument("--kubeconfig-out", type=Path, default=Path("lessor-dev.kubeconfig"),
                     help="where to copy the kubeconfig for kubectl (default: %(default)s)")
    dev.add_argument("--dir", type=Path, default=Path(".lessor/dev"),
                     help="the control plane's folder (default: %(default)s)")
    dev.add_argument("--no-samples", action="store_true", help="do not apply deploy/samples/")
    dev.add_argument("--operator-namespace", default="lessor-system", help="default: %(default)s")
    _run_ports(dev, health=18081, metrics=18080)
    dev.add_argument("--webhook-port", type=int, default=9443,
                     help="the admission webhook's HTTPS port on 127.0.0.1 (default: %(default)s)")
    dev.add_argument("--no-webhook", action="store_true", help="do not serve (or register) the admission webhook")
    dev.add_argument("--metrics", action="store_true",
                     help="also run Prometheus (from PATH: apt-get install prometheus) scraping the operator, "
                     "and print the URL of a graph")
    dev.add_argument("--prometheus-port", type=int, default=19090,
                     help="with --metrics: Prometheus' port on 127.0.0.1 (default: %(default)s)")
    dev.add_argument("--traces", action="store_true",
                     help="also run Zipkin, a trace viewer (fetched once with Maven, run with Java 17+), trace "
                     "the operator into it and into DIR/traces.jsonl (for `lessor trace lease NAMESPACE/NAME`), "
                     "and print the viewer's URL")
    dev.add_argument("--zipkin-port", type=int, default=19411,
                     help="with --traces: Zipkin's port on 127.0.0.1 (default: %(default)s)")
    _trace_leader_election(dev)
    _event_loop_arg(dev)
    dev.add_argument("--grpc", action="store_true",
                     help="also serve Jumpstarter's gRPC protocol (lessor run --grpc-port, the [jumpstarter] extra) "
                     "with the development CA written to DIR/grpc-ca.pem, and print how to point jmp at it")
    dev.add_argument("--grpc-port", type=int, default=18082,
                     help="with --grpc: its port on localhost (default: %(default)s)")

    tr = sub.add_parser(
        "trace", help="print the trace of a lease's or claim's creation as a waterfall",
        description="Read the spans `lessor dev --traces` (or `lessor run` with OTEL_TRACES_EXPORTER=jsonl and "
        "LESSOR_TRACES_FILE) wrote, find the trace that starts at the watch event of the object's creation, "
        "and print every span in it, indented under its parent: when it started after that event (ms), how "
        "long it took, where it ran, errors. It answers `why did my lease wait 4 s?`.",
    )
    tr.add_argument("kind", choices=["lease", "claim"], help="what to trace")
    tr.add_argument("target", metavar="NAMESPACE/NAME", help="the lease or claim")
    tr.add_argument("--file", type=Path, default=Path(".lessor/dev/traces.jsonl"),
                    help="the spans file (default: %(default)s, where `lessor dev --traces` writes)")
    tr.add_argument("--url", action="store_true",
                    help="print the link to the trace in the Zipkin that `lessor dev --traces` runs, not the waterfall")
    tr.add_argument("--zipkin-port", type=int, default=19411,
                    help="with --url: Zipkin's port on 127.0.0.1, as given to `lessor dev` (default: %(default)s)")

    topo = sub.add_parser(
        "topology", help="print the topology of a cluster (Graphviz DOT)",
        description="List every lessor object of the cluster, build the topology the operator routes "
        "with (objects, selector and reference edges), and print it as Graphviz DOT: "
        "`lessor topology --dot | dot -Tsvg > topology.svg`.",
    )
    _kube_args(topo)
    topo.add_argument("--dot", action="store_true", required=True, help="print Graphviz DOT (the only format)")

    conv = sub.add_parser(
        "convert", help="convert Poolboy or Jumpstarter manifests to lessor's",
        description="Read Poolboy (ResourceProvider, ResourcePool, ResourceHandle, ResourceClaim) or "
        "Jumpstarter controller (Client, Exporter, ExporterAccessPolicy, Lease) manifests and write lessor's "
        "on standard output: apiVersion lessor.dev/v1alpha1, providers, pools and handles in the operator's "
        "namespace. Every field that does not carry over unchanged is reported on standard error with the "
        "reason, as left out, will not work (kept, but lessor refuses it or cannot render it: a template "
        "function lessor lacks, named with its line; a value a linked provider refuses), changed, replaced (the "
        "old operator's status and bookkeeping) or copied unchanged, and counted in a last line. Exit status 1 "
        "when anything was left out or will not work (--allow-loss: 0, still reported), 2 for unreadable input. "
        "Nothing is sent to a cluster: `lessor convert old.yaml > new.yaml`, or `kubectl get "
        "resourceproviders.poolboy.gpte.redhat.com -A -o yaml | lessor convert | kubectl apply -f -`. "
        "See docs/migrating.md.",
    )
    conv.add_argument("files", nargs="*", metavar="FILE",
                      help="YAML files (several documents each, or a List); - or none: standard input")
    conv.add_argument("--operator-namespace", default="lessor-system",
                      help="where providers, pools and handles go (default: %(default)s)")
    conv.add_argument("--allow-loss", action="store_true",
                      help="exit 0 even when something was left out or will not work in lessor (it is still reported)")

    mig = sub.add_parser(
        "migrate", help="take over a cluster's Poolboy or Jumpstarter objects, re-creating nothing",
        description="On a live cluster, create lessor's objects for Poolboy's providers, pools, handles, "
        "claims and scalings (handles keep their claims, and the resources they made are adopted by adding "
        "lessor's labels and annotations: nothing is deleted or re-created; scalings keep their counts), or "
        "for the Jumpstarter controller's clients, exporters, policies and leases (active leases keep their "
        "exporters). The old objects are left as they are: stop the old operator first. Fields that do not "
        "carry over are reported as by `lessor convert`. See docs/migrating.md.",
    )
    mig.add_argument("source", choices=("poolboy", "jumpstarter"), help="what to migrate from")
    _kube_args(mig)
    mig.add_argument("--dry-run", action="store_true",
                     help="print the plan (every object to create and resource to adopt) and change nothing")
    mig.add_argument("--namespace", action="append", default=[], metavar="NS",
                     help="only objects in this namespace (repeatable; providers, pools and handles are read "
                     "from the old operator's namespace); default: all namespaces")
    mig.add_argument("--poolboy-namespace", default="poolboy",
                     help="the namespace of Poolboy's providers, pools and handles (default: %(default)s)")
    mig.add_argument("--poolboy-group", default="poolboy.gpte.redhat.com",
                     help="Poolboy's API group (default: %(default)s)")
    mig.add_argument("--jumpstarter-group", default="jumpstarter.dev",
                     help="the Jumpstarter controller's API group (default: %(default)s)")

    bench = sub.add_parser(
        "bench", help="run a benchmark and print its JSON",
        description="Run one benchmark and print its result as JSON on stdout (progress on stderr).",
    )
    bench_sub = bench.add_subparsers(dest="benchmark", required=True, metavar="BENCHMARK")
    named = _benchmark_named(sys.argv[1:] if argv is None else argv)
    for name, text in BENCHMARKS.items():
        p = bench_sub.add_parser(name, help=text, description=f"{text}. Prints JSON on stdout.")
        if name == named:
            module = importlib.import_module(f"lessor.tools.bench.{name}")
            if hasattr(module, "add_arguments"):
                module.add_arguments(p)
    return parser


def _benchmark_named(argv: Sequence[str]) -> str | None:
    """The NAME of `lessor [-v] bench NAME ...`, else None."""
    words = [word for word in argv if word not in ("-v", "--verbose")]
    return words[1] if len(words) > 1 and words[0] == "bench" else None


def _kube_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster config, else $KUBECONFIG, else ~/.kube/config)")
    p.add_argument("--operator-namespace", default="lessor-system",
                   help="namespace of providers, pools and handles (default: %(default)s)")


def _run_args(p: argparse.ArgumentParser) -> None:
    _run_ports(p, health=8081, metrics=8080)
    p.add_argument("--metrics-secure", action="store_true",
                   help="serve /metrics over HTTPS, only to bearer tokens that the API server authenticates "
                   "(TokenReview) and allows to get the non-resource URL /metrics (SubjectAccessReview): 401 "
                   "without a valid token, 403 without the right; deploy/rbac.yaml has the RBAC")
    p.add_argument("--metrics-cert-dir", type=Path, metavar="DIR",
                   help="with --metrics-secure: serve DIR/tls.crt and DIR/tls.key, reloaded when they change "
                   "(default: a self-signed certificate made at start-up)")
    p.add_argument("--bind-address", default="0.0.0.0", help="address the probes and metrics listen on (default: %(default)s)")
    p.add_argument("--exporter-heartbeat-timeout", type=_seconds, default="60s",
                   help="an exporter is Online while its status.lastSeen is newer than this (default: %(default)s)")
    p.add_argument("--decision-window", type=_seconds, default="250ms",
                   help="how long a free exporter collects requests before offering itself, so that leases "
                   "created together are served by priority rather than arrival (default: %(default)s)")
    p.add_argument("--watch-inactivity-timeout", type=float, default=120.0,
                   help="reconnect a watch that delivered nothing, not even a bookmark, for this many seconds "
                   "(default: %(default)s)")
    p.add_argument("--api-unreachable-timeout", type=_seconds, default="30s",
                   help="/readyz fails once the API server (or etcd behind it) has not answered for this long "
                   "(default: %(default)s)")
    p.add_argument("--max-loop-lag", type=_seconds, default="5s",
                   help="/healthz fails while the event loop runs timers later than this (default: %(default)s)")
    p.add_argument("--events-namespace-burst", type=_non_negative, default=20, metavar="N",
                   help="Normal Events one namespace may get at once; past its budget they are counted into one "
                   "summary Event per reason (series.count), Warnings are always written (default: %(default)s)")
    p.add_argument("--events-namespace-qps", type=_non_negative, default=0.5, metavar="QPS",
                   help="how fast a namespace's Event budget refills, Events per second (default: %(default)s)")
    p.add_argument("--leader-elect", action=argparse.BooleanOptionalAction, default=True,
                   help="elect a leader among replicas; --no-leader-elect for a single replica that leads at "
                   "once (default: elect)")
    p.add_argument("--leader-elect-lease-duration", type=_seconds, default="15s",
                   help="how long followers wait after the leader's last renewal before taking over "
                   "(default: %(default)s)")
    p.add_argument("--leader-elect-renew-deadline", type=_seconds, default="10s",
                   help="the leader stops every actor and write when it could not renew for this long; shorter "
                   "than the lease duration (default: %(default)s)")
    p.add_argument("--leader-elect-retry-period", type=_seconds, default="2s",
                   help="how often the leader renews and candidates try (default: %(default)s)")
    _trace_leader_election(p)
    _event_loop_arg(p)


def _event_loop_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--event-loop", choices=("lane", "asyncio"), default="lane",  # loops.EVENT_LOOPS
                   help="lane: asyncio's selector loop with the mailbox's fast lane, where a quiet namespace's steps "
                   "go before a busy one's (it overrides asyncio internals: if this Python lacks one, the operator "
                   "says which in one warning and runs plain asyncio); asyncio: asyncio's own loop. The actors "
                   "behave the same in both (default: %(default)s)")


def _trace_leader_election(p: argparse.ArgumentParser) -> None:
    p.add_argument("--trace-leader-election", action="store_true",
                   help="with tracing on (OTEL_TRACES_EXPORTER): also trace the leader election's requests, a "
                   "renewal every retry period (default: not traced, so they do not bury the lessor traces)")


def _webhook_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--webhook-port", type=int, default=9443, help="the admission webhook's HTTPS port (default: %(default)s)")
    p.add_argument("--webhook-cert-dir", type=Path, metavar="DIR",
                   help="serve DIR/tls.crt and DIR/tls.key, reloaded when they change; deploy/webhook.yaml "
                   "registers the webhook. Without it: a development CA and certificate for 127.0.0.1, and "
                   "lessor run registers the ValidatingWebhookConfiguration lessor-preflight itself")
    p.add_argument("--no-webhook", action="store_true", help="do not serve (or register) the admission webhook")
    p.add_argument("--webhook-timeout", type=int, default=10,
                   help="the webhook configuration's timeoutSeconds, at most 30; must match deploy/webhook.yaml "
                   "with --webhook-cert-dir (default: %(default)s)")
    p.add_argument("--webhook-margin", type=float, default=2.0,
                   help="seconds before the timeout at which unfinished checks are cut off, so their results "
                   "still reach the user (default: %(default)s)")


def _grpc_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--grpc-port", type=int, metavar="PORT",
                   help="serve Jumpstarter's gRPC protocol (exporters' ControllerService, jmp's ClientService, the "
                   "RouterService of jmp shell) on "
                   "this port, over TLS, and mint a token Secret for every Client and Exporter (status.credential); "
                   "needs the [jumpstarter] extra. Default: not served. See docs/jumpstarter-grpc.md")
    p.add_argument("--grpc-endpoint", metavar="HOST:PORT",
                   help="with --grpc-port: the endpoint the tools dial, written into status.endpoint and the configs "
                   "of `lessor credentials` (default: localhost:PORT)")
    p.add_argument("--grpc-cert-dir", type=Path, metavar="DIR",
                   help="with --grpc-port: serve DIR/tls.crt and DIR/tls.key, which must name the endpoint's host "
                   "(default: a certificate for localhost and 127.0.0.1 of the development CA kept in --grpc-ca-dir)")
    p.add_argument("--grpc-token-lifetime", type=_seconds, metavar="DURATION",
                   help="with --grpc-port: how long a minted token is valid (its exp claim, e.g. 8760h as upstream's "
                   "default); a client renews its own with `jmp auth rotate` (RotateToken), and an expired token is "
                   "UNAUTHENTICATED. Default: tokens without expiry, revoked by `lessor credentials rotate-key`")
    p.add_argument("--grpc-advertise", metavar="HOST:PORT",
                   help="with --grpc-port: this replica's own address (in a pod: its IP and PORT), which the leader "
                   "writes into the leader Lease (annotation lessor.dev/holder-grpc) and a follower relays every "
                   "call to (default: the --grpc-endpoint)")
    p.add_argument("--grpc-forward-to-leader", action=argparse.BooleanOptionalAction, default=True,
                   help="with --grpc-port: a follower relays every call to the leader's --grpc-advertise address, "
                   "checking its certificate with --grpc-cert-dir's ca.crt, and returns the leader's answer; "
                   "--no-grpc-forward-to-leader: it answers UNAVAILABLE naming that address, as it also does "
                   "without a ca.crt (default: forward)")
    p.add_argument("--grpc-leader-wait", type=_seconds, metavar="DURATION",
                   help="with --grpc-port: how long a follower holds a call while no leader answers (the leader "
                   "crashed, an election is under way) before answering UNAVAILABLE; a replica that becomes the "
                   "leader meanwhile serves the held calls itself (default: --leader-elect-lease-duration + 10s)")
    p.add_argument("--grpc-ca-dir", type=Path, metavar="DIR",
                   help="without --grpc-cert-dir: keep the development CA in DIR (ca.crt, ca.key), made at the first "
                   "start and reused at every later one, so that configs made with it stay valid (default: "
                   "$XDG_CACHE_HOME/lessor/grpc-ca, that is ~/.cache/lessor/grpc-ca)")
    p.add_argument("--grpc-auth-config", type=Path, metavar="FILE",
                   help="with --grpc-port: also accept OIDC tokens from the issuers in FILE, a YAML file in the "
                   "Jumpstarter controller's config shape: authentication.jwt lists Kubernetes' JWT authenticators "
                   "(issuer.url, issuer.audiences, claimMappings.username.claim and .prefix); a token's mapped "
                   "username must be the Client's or Exporter's spec.username. See docs/jumpstarter-grpc.md")
    p.add_argument("--grpc-login-port", type=int, metavar="PORT",
                   help="with --grpc-port: serve the login service that `jmp login CLIENT@HOST:PORT` reads "
                   "(GET /v1/auth/config over HTTPS with the gRPC certificate: the gRPC endpoint, the CA bundle, "
                   "and the issuers of --grpc-auth-config). Default: not served")
    p.add_argument("--grpc-login-namespace", default="default", metavar="NAMESPACE",
                   help="with --grpc-login-port: the namespace it tells `jmp login` (default: %(default)s)")
    p.add_argument("--grpc-ca-out", type=Path, metavar="FILE",
                   help="without --grpc-cert-dir: write the development CA's PEM here, for `lessor credentials "
                   "--ca-file`")


def _seconds(text: str) -> float:
    from lessor.templates import parse_duration

    try:
        return parse_duration(text).total_seconds()
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration such as 60s, 1m30s or 250ms: {err}") from None


def _non_negative(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:  # NaN too
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of at least 0")
    return value


def _run_ports(p: argparse.ArgumentParser, *, health: int, metrics: int) -> None:
    p.add_argument("--health-port", type=int, default=health, help="/healthz and /readyz (default: %(default)s)")
    p.add_argument("--metrics-port", type=int, default=metrics, help="Prometheus /metrics (default: %(default)s)")


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser(argv).parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        with asyncio.Runner(loop_factory=_loop_factory(args)) as runner:
            return runner.run(_dispatch(args)) or 0
    except KeyboardInterrupt:
        return 130
    except asyncio.CancelledError:  # SIGTERM
        return 143
    except Exception as err:  # a clear one-line answer instead of a traceback for user errors
        if args.verbose:
            raise
        _say(f"error: {err}")
        return 1


def _loop_factory(args: argparse.Namespace) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The operator (and the benches, which measure the runtime in-process too) runs in the mailbox's loop, where
    a quiet namespace's steps go before a busy one's line (`lessor.mailbox.lanes`), unless `--event-loop asyncio`
    or this Python lacks what the lane needs (`lessor.mailbox.loops`); the other commands in asyncio's own,
    without importing the runtime."""
    if args.command not in ("run", "bench"):
        return None
    from lessor.mailbox.loops import EventLoop, new_event_loop

    kind: EventLoop = "asyncio" if getattr(args, "event_loop", "lane") == "asyncio" else "lane"  # bench has no flag
    return lambda: new_event_loop(kind)


async def _dispatch(args: argparse.Namespace) -> int | None:
    # SIGTERM (a pod being stopped, `lessor dev` stopping its operator) unwinds like Ctrl-C:
    # context managers run, so a development webhook registration is removed, children stop.
    main_task = asyncio.current_task()
    assert main_task is not None
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, main_task.cancel)
    if args.command == "controlplane":
        from lessor.tools.dev.commands import run_controlplane

        return await run_controlplane(args.dir, controller_manager=not args.no_controller_manager)
    if args.command == "install":
        from lessor.gateway import Gateway
        from lessor.app.install import install

        async with await Gateway.connect(args.kubeconfig) as gateway:
            await install(gateway, args.operator_namespace, progress=_say, leader_fence=args.leader_elect)
        return 0
    if args.command == "run":
        from lessor.admission.server import WebhookSettings
        from lessor.leadership.election import ElectionSettings
        from lessor.jumpstarter.settings import GrpcSettings, require_extra
        from lessor.app.operator import OperatorConfig, run_operator

        if args.grpc_port is not None:
            require_extra()
        if args.grpc_auth_config is not None:  # a mistake in it is named now, not when the endpoint starts
            from lessor.jumpstarter.oidc import AuthConfig

            AuthConfig.load(args.grpc_auth_config)
        grpc = None if args.grpc_port is None else GrpcSettings(
            port=args.grpc_port, endpoint=args.grpc_endpoint or f"localhost:{args.grpc_port}",
            cert_dir=args.grpc_cert_dir, ca_out=args.grpc_ca_out, advertise=args.grpc_advertise,
            **({"ca_dir": args.grpc_ca_dir} if args.grpc_ca_dir else {}),
            token_lifetime=args.grpc_token_lifetime, forward_to_leader=args.grpc_forward_to_leader,
            leader_wait=args.grpc_leader_wait, auth_config=args.grpc_auth_config,
            login_port=args.grpc_login_port, login_namespace=args.grpc_login_namespace,
        )
        webhook = None if args.no_webhook else WebhookSettings(
            port=args.webhook_port, cert_dir=args.webhook_cert_dir,
            timeout=args.webhook_timeout, margin=args.webhook_margin,
        )
        await run_operator(OperatorConfig(
            kubeconfig=args.kubeconfig, operator_namespace=args.operator_namespace,
            bind_address=args.bind_address, health_port=args.health_port, metrics_port=args.metrics_port,
            metrics_secure=args.metrics_secure, metrics_cert_dir=args.metrics_cert_dir,
            watch_inactivity_timeout=args.watch_inactivity_timeout, webhook=webhook,
            exporter_heartbeat_timeout=args.exporter_heartbeat_timeout, decision_window=args.decision_window,
            leader_election=ElectionSettings(
                lease_duration=args.leader_elect_lease_duration, renew_deadline=args.leader_elect_renew_deadline,
                retry_period=args.leader_elect_retry_period, traced=args.trace_leader_election,
            ) if args.leader_elect else None,
            api_unreachable_timeout=args.api_unreachable_timeout, max_loop_lag=args.max_loop_lag, grpc=grpc,
            events_namespace_burst=int(args.events_namespace_burst), events_namespace_qps=args.events_namespace_qps,
        ))
        return 0
    if args.command == "credentials":
        from lessor.app.api_adapter import GatewayApi
        from lessor.gateway import Gateway
        from lessor.jumpstarter.configs import config_for, dump

        if args.kind == "rotate-key":
            from lessor.jumpstarter.tokens import rotate

            async with await Gateway.connect(args.kubeconfig) as gateway:
                await rotate(gateway, GatewayApi(gateway), args.operator_namespace, _say)
            return 0
        if not args.name:
            raise ValueError(f"lessor credentials {args.kind} needs the {args.kind}'s NAME")
        ca_pem = args.ca_file.read_bytes() if args.ca_file else None
        async with await Gateway.connect(args.kubeconfig) as gateway:
            text = dump(await config_for(GatewayApi(gateway), args.kind, args.namespace, args.name,
                                         endpoint=args.endpoint, ca_pem=ca_pem, insecure=args.insecure))
        if args.output is None:
            sys.stdout.write(text)
        else:
            args.output.write_text(text, encoding="utf-8")
            args.output.chmod(0o600)  # it holds a bearer token
            _say(f"wrote {args.output}")
        return 0
    if args.command == "dev":
        if args.grpc:
            from lessor.jumpstarter.settings import require_extra

            require_extra()
        from lessor.tools.dev.commands import run_dev

        return await run_dev(args)
    if args.command == "trace":
        from lessor.telemetry.tracefile import print_trace

        return print_trace(args.kind, args.target, args.file, sys.stdout,
                           zipkin_port=args.zipkin_port if args.url else None)
    if args.command == "topology":
        from lessor.gateway import LESSOR_RESOURCES, Gateway
        from lessor.topology import ADDED, Topology

        topology = Topology(args.operator_namespace)
        async with await Gateway.connect(args.kubeconfig) as gateway:
            for resource in LESSOR_RESOURCES:
                for obj in (await gateway.list(resource))[0]:
                    topology.apply(ADDED, obj)
        sys.stdout.write(topology.to_dot())
        return 0
    if args.command == "convert":
        from lessor.tools.porting.commands import run_convert

        return run_convert(args.files, operator_namespace=args.operator_namespace, allow_loss=args.allow_loss)
    if args.command == "migrate":
        from lessor.tools.porting.migrate import run_migrate

        return await run_migrate(args)
    if args.command == "bench":
        module = importlib.import_module(f"lessor.tools.bench.{args.benchmark}")
        result = await module.run(args)
        sys.stdout.write(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode() + "\n")
        return 0
    raise AssertionError(args.command)
