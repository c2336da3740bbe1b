"""The fleet stack's files wired to each other and to the code: every replica behind the router
and scraped by Prometheus, the router hashing the header the judge sends, the replicas reporting
what the judge reads, the judge pointed at the router with the remote engine."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import yaml

from reflectrm.engines.remote import SESSION_HEADER
from reflectrm.settings import Settings
from tests.unit.test_deploy import DEPLOY, load_compose, tool

FLEET = DEPLOY / "compose.fleet.yaml"
PROMETHEUS = DEPLOY / "prometheus.fleet.yml"


def flag_values(command: list[str], flag: str) -> list[str]:
    """The values after ``flag`` up to the next flag."""
    i = command.index(flag)
    values = []
    for item in command[i + 1 :]:
        if item.startswith("--"):
            break
        values.append(item)
    return values


def test_fleet_wiring():
    services = load_compose(FLEET, {})["services"]
    replicas = sorted(name for name in services if name.startswith("replica-"))
    assert len(replicas) >= 2
    for name in replicas:
        command = services[name]["command"]
        # Prefix caching and the cached-token counts the judge reports in usage.
        assert "--enable-prefix-caching" in command
        assert "--enable-prompt-tokens-details" in command
        assert flag_values(command, "--port") == ["8000"]
        served = flag_values(command, "--served-model-name")
        [gpu] = services[name]["deploy"]["resources"]["reservations"]["devices"]
        assert gpu["driver"] == "nvidia"
        assert len(gpu["device_ids"]) == 1
    gpus = [
        services[n]["deploy"]["resources"]["reservations"]["devices"][0]["device_ids"][0]
        for n in replicas
    ]
    assert len(set(gpus)) == len(gpus), "two replicas on one GPU"

    router = services["router"]["command"]
    assert flag_values(router, "--worker-urls") == [f"http://{n}:8000" for n in replicas]
    assert flag_values(router, "--policy") == ["consistent_hash"]
    # vllm-router's consistent hash reads X-Session-ID first: the header the judge sends.
    assert SESSION_HEADER == "X-Session-ID"
    router_metrics_port = flag_values(router, "--prometheus-port")[0]

    judge = services["judge"]["environment"]
    assert judge["REFLECTRM_ENGINE"] == "remote"
    assert judge["REFLECTRM_ENGINE_URL"] == f"http://router:{flag_values(router, '--port')[0]}"
    assert [judge["REFLECTRM_MODEL"]] == served
    assert "deploy" not in services["judge"], "the judge needs no GPU"
    settings = Settings(
        engine=judge["REFLECTRM_ENGINE"],
        engine_url=judge["REFLECTRM_ENGINE_URL"],
        model=judge["REFLECTRM_MODEL"],
    )
    assert settings.engine_affinity, "affinity is the default"

    scrape = yaml.safe_load(PROMETHEUS.read_text())["scrape_configs"]
    targets = {job["job_name"]: job["static_configs"][0]["targets"] for job in scrape}
    assert targets["reflectrm"] == ["judge:8000"]
    assert targets["vllm"] == [f"{n}:8000" for n in replicas]
    assert targets["vllm-router"] == [f"router:{router_metrics_port}"]
    mounted = {v.split(":")[1]: v.split(":")[0] for v in services["prometheus"]["volumes"]}
    assert (DEPLOY / mounted["/etc/prometheus/prometheus.yml"]).resolve() == PROMETHEUS
    home = services["grafana"]["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    dashboard = DEPLOY / "grafana" / "dashboards" / Path(home).name
    assert json.loads(dashboard.read_text())["uid"] == "reflectrm-fleet"


def test_fleet_dashboard_has_per_replica_engine_panels():
    dashboard = json.loads((DEPLOY / "grafana" / "dashboards" / "reflectrm-fleet.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    per_replica = [e for e in exprs if "vllm:" in e and "instance" in e]
    assert any("prefix_cache_hits" in e for e in per_replica)
    assert any("num_requests_running" in e for e in per_replica)
    assert any("vllm_router_" in e for e in exprs)


def test_fleet_prometheus_config_is_valid():
    promtool = tool("promtool")
    result = subprocess.run(
        [promtool, "check", "config", str(PROMETHEUS)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
