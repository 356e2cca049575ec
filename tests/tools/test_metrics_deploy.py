"""The files that deploy kgc with its metrics: dashboard, compose, Prometheus, Docker.

How this works: no Docker engine runs here, so each file is checked for what would break
it there. The Grafana dashboard (docs/grafana/kgc.json) parses and every PromQL query in
it names only metrics that a real ``kgc serve`` exports (every family of its scrape, with
the sample suffixes of its type). The compose file, the Prometheus configuration and
Grafana's provisioning files parse, and what they reference exists and agrees (services,
ports, mounted files, the dashboard's path). ``.dockerignore`` keeps the build context
small and the Dockerfile's sources in it. The Dockerfile's HEALTHCHECK script, cut out of
the Dockerfile, runs against real servers configured by flags and by a properties file
(metrics on: /healthz; metrics off: the first listener), and fails when the server's
event loop is stopped.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import signal
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml  # type: ignore[import-untyped]
from prometheus_client.parser import text_string_to_metric_families
from support.groupkit import wait_until
from support.kgc_process import KgcProcess, free_port

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
DASHBOARD = DOCS / "grafana" / "kgc.json"

# PromQL words that are not metric names (functions are recognised by their "(").
PROMQL_KEYWORDS = {"and", "or", "unless", "bool", "offset", "inf", "nan"}
SUFFIXES = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "summary": ("_sum", "_count", "_created"),
    "gauge": ("",),
    "unknown": ("",),
}


def exported_names(text: str) -> set[str]:
    """Every sample name the scrape's families may carry (empty families included)."""
    names: set[str] = set()
    for family in text_string_to_metric_families(text):
        names.update(family.name + suffix for suffix in SUFFIXES[family.type])
    return names


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects."""
    e = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # strings
    e = re.sub(r"\{[^}]*\}", " ", e)  # label matchers
    e = re.sub(r"\[[^\]]*\]", " ", e)  # range selectors
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", e)
    names = set()
    for m in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", e):
        if e[m.end() :].lstrip().startswith("(") or m.group() in PROMQL_KEYWORDS:
            continue  # a function call or an operator
        names.add(m.group())
    return names


def panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", [])  # a collapsed row's


def test_promql_metric_names_are_found() -> None:
    expr = (
        "histogram_quantile(0.99, sum by (le, api) (rate(kgc_request_duration_seconds_bucket"
        '{instance=~"$instance", api!="Fetch"}[$__rate_interval]))) / on (instance) '
        "group_left () max(kgc_connections) > bool 0"
    )
    assert metric_names(expr) == {"kgc_request_duration_seconds_bucket", "kgc_connections"}


@pytest.mark.integration
def test_the_dashboard_queries_only_metrics_kgc_exports(kgc: KgcProcess) -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] == "kgc-overview" and dashboard["title"] == "kgc"
    with urllib.request.urlopen(f"http://127.0.0.1:{kgc.metrics_port}/metrics", timeout=10) as r:
        exported = exported_names(r.read().decode())

    used: dict[str, set[str]] = {}  # metric -> panel titles
    ids = [p["id"] for p in panels(dashboard)]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for panel in panels(dashboard):
        if panel["type"] == "row":
            continue
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "${datasource}"
            for name in metric_names(target["expr"]):
                used.setdefault(name, set()).add(panel["title"])
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            (name,) = re.findall(r"label_values\((\w+)", variable["query"]["query"])
            used.setdefault(name, set()).add(f"${variable['name']}")
    unknown = {name: titles for name, titles in used.items() if name not in exported}
    assert not unknown, f"queries name metrics kgc does not export: {unknown}"
    # What the dashboard is for: groups, lag in records and time, rebalances (per group
    # too), request rates, errors and latency, connections.
    for needed in (
        "kgc_groups_by_type",
        "kgc_consumergroup_lag",
        "kgc_consumergroup_lag_seconds",
        "kgc_consumergroup_committed_offset",
        "kgc_partition_log_end_offset",
        "kgc_group_rebalances_total",
        "kgc_rebalances_total",
        "kgc_requests_total",
        "kgc_request_duration_seconds_bucket",
        "kgc_connections",
    ):
        assert needed in used, needed


def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def test_compose_prometheus_and_grafana_files_agree() -> None:
    compose = load_yaml(DOCS / "compose.yml")
    services = compose["services"]
    assert set(services) == {"kgc", "prometheus", "grafana"}
    kgc = services["kgc"]
    assert (DOCS / kgc["build"] / "Dockerfile").is_file()
    assert "9404:9404" in kgc["ports"] and "9092:9092" in kgc["ports"]
    assert services["prometheus"]["depends_on"]["kgc"]["condition"] == "service_healthy"
    # Every bind mount's source exists (relative to docs/, where the compose file is).
    mounts: dict[str, str] = {}
    for name, service in services.items():
        for volume in service.get("volumes", []):
            source, target = volume.split(":")[:2]
            if source.startswith("."):
                assert (DOCS / source).exists(), (name, source)
                mounts[target] = source
            else:
                assert source in compose["volumes"], (name, source)

    # Prometheus scrapes the kgc service's metrics port, with its configuration mounted.
    assert mounts["/etc/prometheus/prometheus.yml"] == "./prometheus.yml"
    prometheus = load_yaml(DOCS / "prometheus.yml")
    (job,) = prometheus["scrape_configs"]
    (static,) = job["static_configs"]
    assert static["targets"] == ["kgc:9404"]

    # Grafana: the provisioning files are mounted where Grafana reads them; the data source
    # is the prometheus service; the dashboard provider's folder holds the mounted
    # dashboard, which is also the home dashboard.
    grafana = services["grafana"]
    where = {source: target for target, source in mounts.items()}  # source -> container path
    datasources = "./grafana/provisioning/datasources.yml"
    dashboards = "./grafana/provisioning/dashboards.yml"
    assert where[datasources].startswith("/etc/grafana/provisioning/datasources/")
    assert where[dashboards].startswith("/etc/grafana/provisioning/dashboards/")
    (datasource,) = load_yaml(DOCS / datasources)["datasources"]
    assert datasource["type"] == "prometheus" and datasource["isDefault"]
    assert datasource["url"] == "http://prometheus:9090"
    assert "9090:9090" in services["prometheus"]["ports"]
    (provider,) = load_yaml(DOCS / dashboards)["providers"]
    dashboard = where["./grafana/kgc.json"]
    assert Path(dashboard).parent == Path(provider["options"]["path"])
    assert grafana["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"] == dashboard


def dockerignore_rules() -> list[tuple[bool, str]]:
    rules = []
    for line in (REPO / ".dockerignore").read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            negate = line.startswith("!")
            rules.append((negate, line.lstrip("!").strip("/")))
    return rules


def ignored(rel: str, rules: list[tuple[bool, str]]) -> bool:
    """Docker's rule: the last pattern matching the path (or a directory above it) wins."""
    parts = rel.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    verdict = False
    for negate, pattern in rules:
        for path in prefixes:
            candidates = {pattern}
            if pattern.startswith("**/"):
                candidates.add(pattern[3:])
            if any(
                fnmatch.fnmatchcase(path, c) or fnmatch.fnmatchcase(path.rsplit("/", 1)[-1], c)
                if c.startswith("*") or "/" not in c
                else fnmatch.fnmatchcase(path, c)
                for c in candidates
            ):
                verdict = not negate
                break
    return verdict


def test_dockerignore_keeps_the_context_small_and_the_sources_in() -> None:
    rules = dockerignore_rules()
    for heavy in (
        ".venv",
        "build",
        "kgc.egg-info",
        ".git",
        ".mypy_cache",
        "kgc-data",
        "coordinator/__pycache__",
        "coordinator/group/__pycache__/x.pyc",
        # A compiled editable install's extensions would shadow the image's own build.
        "storage/record_batch.cpython-311-x86_64-linux-gnu.so",
        "tests",
    ):
        assert ignored(heavy, rules), heavy
    # What the Dockerfile copies into the build stage stays in the context.
    copied = re.findall(
        r"^COPY (?!--from)(?!--chmod)(.+?) \S+$", (REPO / "Dockerfile").read_text(), re.M
    )
    sources = [s for line in copied for s in line.split()]
    assert set(sources) == {
        "pyproject.toml",
        "setup.py",
        "README.md",
        "protocol",
        "storage",
        "coordinator",
    }
    for source in sources:
        assert (REPO / source).exists() and not ignored(source, rules), source
    # The context that would be sent: a few MB, not the 1 GB virtualenv.
    size = 0
    for root, dirs, files in os.walk(REPO):
        rel_root = os.path.relpath(root, REPO)
        rel = "" if rel_root == "." else rel_root + "/"
        dirs[:] = [d for d in dirs if not ignored(rel + d, rules)]
        size += sum(
            os.path.getsize(os.path.join(root, f)) for f in files if not ignored(rel + f, rules)
        )
    print(f"\ndocker build context: {size / 1e6:.1f} MB")
    assert size < 50e6


def healthcheck_script(tmp_path: Path) -> Path:
    """The HEALTHCHECK's script, as the Dockerfile's heredoc writes it into the image."""
    dockerfile = (REPO / "Dockerfile").read_text()
    match = re.search(
        r"^COPY --chmod=755 <<'EOF' /usr/local/bin/kgc-healthcheck\n(.*?)^EOF$",
        dockerfile,
        re.S | re.M,
    )
    assert match, "the Dockerfile writes /usr/local/bin/kgc-healthcheck from a heredoc"
    assert re.search(r'^HEALTHCHECK .*\n\s+CMD \["kgc-healthcheck"\]$', dockerfile, re.M)
    script = tmp_path / "kgc-healthcheck"
    script.write_text(match.group(1))
    return script


def check(script: Path, pid: int, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KGC_")}
    return subprocess.run(
        [sys.executable, str(script), str(pid)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.integration
def test_the_healthcheck_follows_the_configured_ports(tmp_path: Path) -> None:
    script = healthcheck_script(tmp_path)

    # Ports given as flags, metrics on: /healthz, answered by the event loop.
    flags = KgcProcess(tmp_path / "flags")
    flags.start()
    try:
        assert flags.proc is not None
        ok = check(script, flags.proc.pid, tmp_path)
        assert ok.returncode == 0, ok
        # A stopped loop cannot answer: unhealthy (within the script's 4 s timeout).
        flags.proc.send_signal(signal.SIGSTOP)
        try:
            stuck = check(script, flags.proc.pid, tmp_path)
        finally:
            flags.proc.send_signal(signal.SIGCONT)
        assert stuck.returncode == 1, stuck
        assert "not healthy" in stuck.stderr
        assert check(script, flags.proc.pid, tmp_path).returncode == 0
    finally:
        flags.stop()

    # Ports from a properties file, metrics off: the first listener is connected to.
    port = free_port()
    props = tmp_path / "server.properties"
    props.write_text(f"listeners=PLAINTEXT://127.0.0.1:{port}\nmetrics.port=0\n")
    log = (tmp_path / "props.log").open("wb")
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "coordinator",
            "serve",
            "--config",
            str(props),
            "--data-dir",
            str(tmp_path / "props-data"),
        ],
        cwd=REPO,
        stdout=log,
        stderr=subprocess.STDOUT,
        env={k: v for k, v in os.environ.items() if not k.startswith("KGC_")},
    )
    try:

        def listening() -> bool:
            assert server.poll() is None, (tmp_path / "props.log").read_text()
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                return True
            except OSError:
                return False

        wait_until(listening, what="the server listening on the properties file's port")
        ok = check(script, server.pid, tmp_path)
        assert ok.returncode == 0, ok
        server.send_signal(signal.SIGTERM)
        assert server.wait(30) == 0
        # The same command line once nothing listens there: unhealthy. (A process whose
        # command line is the server's: this test's own stand-in, sleeping.)
        stand_in = subprocess.Popen(
            [sys.executable, "-c", "import time; time.sleep(60)", "serve", "--config", str(props)]
        )
        try:
            down = check(script, stand_in.pid, tmp_path)
        finally:
            stand_in.kill()
            stand_in.wait()
        assert down.returncode == 1, down
        assert "Connection refused" in down.stderr or "ConnectionRefused" in down.stderr
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
        log.close()
