"""Autoscaling and the dashboard, offline: the HorizontalPodAutoscaler of deploy/base (CPU),
the component deploy/autoscaling/busy (the busy ratio, through the Prometheus adapter rule
of deploy/autoscaling/prometheus-adapter-values.yaml), and the Grafana dashboard
deploy/grafana/conveyor-dashboard.json. Every metric they name, and every metric the
metrics reference page lists, is one that a real server exports (scraped once per module,
after it streamed a pipeline), so none can drift."""

from __future__ import annotations

import json
import os
import re
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from conveyor_server.demo.run import rotate_pipeline
from conveyor_server.store.redis_process import RedisProcess
from tests.project.test_deploy import CONFIG_KEYS, K8S_VERSION
from tests.support.kube import DEPLOY, ROOT, env_paths, one, render
from tests.support.resume import run_batches
from tests.support.servers import ServerProcess, client

DASHBOARD = DEPLOY / "grafana" / "conveyor-dashboard.json"
ADAPTER_VALUES = DEPLOY / "autoscaling" / "prometheus-adapter-values.yaml"
METRICS_PAGE = ROOT / "docs" / "reference" / "metrics.md"
SERVER_KUSTOMIZATIONS = ("base", "overlays/cpu", "overlays/gpu")
#: What the dashboard must show: per pipeline images, waiting and workers; per server
#: load, pipelines and streams.
DASHBOARD_SIGNALS = {
    "conveyor_pipeline_samples_streamed_total", "conveyor_pipeline_starved_seconds_total",
    "conveyor_pipeline_workers", "conveyor_worker_busy_ratio", "conveyor_hosted_pipelines",
    "conveyor_active_streams"}
PROMQL_WORDS = {"and", "or", "unless", "by", "without", "on", "ignoring", "group_left",
                "group_right", "bool", "offset", "inf", "nan"}


@dataclass(frozen=True)
class Exported:
    series: dict[str, set[str]]   # every sample name a scrape shows, with its label names
    families: dict[str, str]      # name -> type, as the TYPE lines give them


def parse_exposition(text: str) -> Exported:
    series: dict[str, set[str]] = {}
    families: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            families[name] = kind
        elif line and not line.startswith("#"):
            match = re.match(r"([A-Za-z_:][\w:]*)(\{[^}]*\})?", line)
            assert match, line
            labels = re.findall(r'(\w+)="', match.group(2) or "")
            series.setdefault(match.group(1), set()).update(labels)
    return Exported(series, families)


@pytest.fixture(scope="module")
def exported(image_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Exported]:
    """What a real server exports once it hosts a pipeline that streamed."""
    redis = RedisProcess(appendonly=False)
    redis.start()
    try:
        server = ServerProcess(redis.url, [image_root], tmp_path_factory.mktemp("server"),
                               metrics=True).start()
        try:
            with client(server) as c:
                pipe = c.create("dashboard", rotate_pipeline(str(image_root / "imgs")))
                run_batches(pipe, 2)  # type: ignore[arg-type]
                pipe.close()
            with urllib.request.urlopen(server.metrics_url, timeout=10) as reply:
                text = reply.read().decode()
        finally:
            server.stop()
    finally:
        redis.cleanup()
    yield parse_exposition(text)


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects: identifiers that are neither a
    function, a keyword, a label (in matchers and in by/without/on/ignoring lists), a
    string nor a duration."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'', '""', expr)
    text = re.sub(r"\{[^}]*\}", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    text = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ",
                  text)
    names = set()
    for match in re.finditer(r"(?<![\w.$])[A-Za-z_:][\w:]*", text):
        word = match.group()
        if text[match.end():].lstrip().startswith("(") or word.lower() in PROMQL_WORDS:
            continue
        names.add(word)
    return names


def test_metric_names_of_promql() -> None:
    assert metric_names(
        'sum by (pipeline) (rate(conveyor_a_total{pipeline=~"$pipeline",x="b c"}[$__rate_'
        'interval])) / on (instance) group_left conveyor_b > bool 0.1 or vector(0)'
    ) == {"conveyor_a_total", "conveyor_b"}
    assert metric_names("histogram_quantile(0.9, sum by (le) (rate(h_bucket[5m] offset 1h)))"
                        ) == {"h_bucket"}
    assert metric_names("count(up) * 1e3 - avg_over_time(g[2m]) unless nope") == \
        {"up", "g", "nope"}


def dashboard_panels() -> list[dict[str, Any]]:
    board = json.loads(DASHBOARD.read_text())
    panels: list[dict[str, Any]] = []
    for panel in board["panels"]:
        panels.append(panel)
        panels.extend(panel.get("panels", []))  # a collapsed row holds its panels
    return panels


def test_dashboard_queries_name_only_exported_metrics(exported: Exported) -> None:
    used: set[str] = set()
    for panel in dashboard_panels():
        if panel["type"] == "row":
            continue
        what = f"panel {panel['title']!r}"
        assert panel["targets"], what
        for target in panel["targets"]:
            names = metric_names(target["expr"])
            assert names, f"{what}: {target['expr']}"
            unknown = names - exported.series.keys()
            assert not unknown, f"{what} queries metrics no server exports: {unknown}"
            used |= names
    assert used >= DASHBOARD_SIGNALS
    # The pipeline picker lists the label of a series that carries it.
    board = json.loads(DASHBOARD.read_text())
    (variable,) = [v for v in board["templating"]["list"] if v["name"] == "pipeline"]
    match = re.fullmatch(r"label_values\((\w+),\s*(\w+)\)", variable["query"]["query"])
    assert match, variable["query"]
    assert match.group(2) in exported.series[match.group(1)]


def test_dashboard_layout_and_datasource() -> None:
    board = json.loads(DASHBOARD.read_text())
    assert board["uid"] and board["title"]
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    panels = dashboard_panels()
    assert len({p["id"] for p in panels}) == len(panels), "panel ids repeat"
    cells: dict[tuple[int, int], str] = {}
    for panel in panels:
        g = panel["gridPos"]
        assert g["x"] >= 0 and g["w"] > 0 and g["x"] + g["w"] <= 24, panel["title"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"{panel['title']} overlaps {cells[(x, y)]}"
                cells[(x, y)] = panel["title"]
        if panel["type"] == "row":
            continue
        assert panel["description"], f"{panel['title']}: say what the panel means"
        sources = [panel["datasource"], *(t["datasource"] for t in panel["targets"])]
        assert all(s == {"type": "prometheus", "uid": "${datasource}"} for s in sources)
        refs = [t["refId"] for t in panel["targets"]]
        assert len(set(refs)) == len(refs), panel["title"]


# ---- the HorizontalPodAutoscaler ---------------------------------------------------------

def cpu_millis(quantity: str) -> int:
    return int(quantity[:-1]) if quantity.endswith("m") else int(float(quantity) * 1000)


def server_container(objects: list[dict[str, Any]]) -> dict[str, Any]:
    deployment = one(objects, "Deployment", "conveyor-server")
    (container,) = [c for c in deployment["spec"]["template"]["spec"]["containers"]
                    if c["name"] == "server"]
    return dict(container)


@pytest.mark.parametrize("kustomization", SERVER_KUSTOMIZATIONS)
def test_hpa_scales_the_servers_on_cpu(kustomization: str) -> None:
    objects = render(kustomization)
    hpa = one(objects, "HorizontalPodAutoscaler", "conveyor-server")
    assert hpa["apiVersion"] == "autoscaling/v2"
    spec = hpa["spec"]
    deployment = one(objects, "Deployment", "conveyor-server")
    assert spec["scaleTargetRef"] == {"apiVersion": deployment["apiVersion"],
                                      "kind": "Deployment", "name": "conveyor-server"}
    # A replica count in the Deployment would undo the autoscaler's on every apply.
    assert "replicas" not in deployment["spec"]
    # An eviction the disruption budget allows still leaves a server.
    pdb = one(objects, "PodDisruptionBudget", "conveyor-server")
    assert 2 <= spec["minReplicas"] < spec["maxReplicas"]
    assert pdb["spec"]["maxUnavailable"] < spec["minReplicas"]
    (cpu,) = spec["metrics"]
    assert cpu["type"] == "Resource" and cpu["resource"]["name"] == "cpu"
    target = cpu["resource"]["target"]
    assert target["type"] == "Utilization"
    # Utilization is relative to the request: the target must lie below the limit, or the
    # servers would never reach it and never scale out.
    resources = server_container(objects)["resources"]
    request = cpu_millis(str(resources["requests"]["cpu"]))
    limit = cpu_millis(str(resources["limits"]["cpu"]))
    assert 0.5 * limit <= target["averageUtilization"] / 100 * request < limit
    # Each removal drains a server (its trainers restore elsewhere): slow, one at a time.
    down = spec["behavior"]["scaleDown"]
    assert down["stabilizationWindowSeconds"] >= 600
    assert all(p["type"] == "Pods" and p["value"] == 1 and p["periodSeconds"] >= 300
               for p in down["policies"])
    assert spec["behavior"]["scaleUp"]["stabilizationWindowSeconds"] > 0


def render_with_busy(overlay: str, tmp_path: Path) -> list[dict[str, Any]]:
    """An overlay with the busy component, as a user's kustomization adds it."""
    here = tmp_path / "kustomization"
    here.mkdir()
    (here / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": [os.path.relpath(DEPLOY / overlay, here)],
        "components": [os.path.relpath(DEPLOY / "autoscaling" / "busy", here)]}))
    return render(str(here))


def adapter_rule() -> dict[str, Any]:
    values = yaml.safe_load(ADAPTER_VALUES.read_text())
    (rule,) = values["rules"]["custom"]
    return dict(rule)


@pytest.mark.parametrize("overlay", ["overlays/cpu", "overlays/gpu"])
def test_busy_component_adds_the_busy_ratio_the_adapter_serves(
    overlay: str, tmp_path: Path, exported: Exported
) -> None:
    objects = render_with_busy(overlay, tmp_path)
    for obj in objects:
        assert kubernetes_validate.validate(obj, K8S_VERSION, strict=True) == "1.32"
    spec = one(objects, "HorizontalPodAutoscaler", "conveyor-server")["spec"]
    cpu, busy = spec["metrics"]
    assert cpu == one(render(overlay), "HorizontalPodAutoscaler",
                      "conveyor-server")["spec"]["metrics"][0]
    assert busy["type"] == "Pods"
    name = busy["pods"]["metric"]["name"]
    target = busy["pods"]["target"]
    assert target["type"] == "AverageValue"
    assert 0 < cpu_millis(target["averageValue"]) / 1000 < 1  # a ratio: 0..1

    # The adapter rule finds the series a server exports, per pod, under the HPA's name.
    rule = adapter_rule()
    series = re.fullmatch(r"(\w+)\{(.*)\}", rule["seriesQuery"])
    assert series, rule["seriesQuery"]
    assert exported.families[series.group(1)] == "gauge"
    assert re.fullmatch(rule["name"]["matches"], series.group(1))
    assert rule["name"]["as"] == name == series.group(1)
    assert rule["resources"]["overrides"] == {"namespace": {"resource": "namespace"},
                                              "pod": {"resource": "pod"}}
    assert {'namespace!=""', 'pod!=""'} <= set(series.group(2).split(","))
    query = rule["metricsQuery"]
    assert all(key in query for key in ("<<.Series>>", "<<.LabelMatchers>>", "<<.GroupBy>>"))

    # As many worker threads as the CPU limit, so the ratio reads 1 when the CPUs are.
    container = server_container(objects)
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert "CONVEYOR_LIMITS_WORKER_THREADS" in env_paths(CONFIG_KEYS)
    threads = int(env["CONVEYOR_LIMITS_WORKER_THREADS"])
    assert threads * 1000 == cpu_millis(str(container["resources"]["limits"]["cpu"]))


# ---- the metrics reference page ----------------------------------------------------------

def test_metrics_page_lists_exactly_what_a_server_exports(exported: Exported) -> None:
    listed = set()
    for line in METRICS_PAGE.read_text().splitlines():
        match = re.match(r"\| `(conveyor_\w+)(\{[^`]*\})?` \|", line)
        if match:
            listed.add(match.group(1))
    families = {name for name, kind in exported.families.items()
                if not (name.endswith("_created") and kind == "gauge")}
    assert listed == families, (f"exported, not on the page: {families - listed}; "
                                f"on the page, not exported: {listed - families}")
