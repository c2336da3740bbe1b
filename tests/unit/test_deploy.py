"""The deployment files: compose validated against the compose-spec schema, the Dockerfile linted
with hadolint, the Prometheus config and every dashboard query checked by promtool, and the
pieces wired to each other (service names, ports, mounts, datasource uid, settings)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from reflectrm.settings import Settings

from tests.conftest import SHARED_DATA

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
COMPOSE = DEPLOY / "compose.yaml"
ROOT_COMPOSE = ROOT / "compose.yaml"
ENV_EXAMPLE = ROOT / ".env.example"
DOCKERFILE = ROOT / "Dockerfile"
SCHEMA = SHARED_DATA / "schemas" / "compose-spec.json"
DASHBOARDS = sorted((DEPLOY / "grafana" / "dashboards").glob("*.json"))
PROVISIONING = DEPLOY / "grafana" / "provisioning"

# ${NAME}, ${NAME:-default}, ${NAME-default}, ${NAME:?error}, ${NAME?error}
VARIABLE = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?])(?P<arg>[^}]*))?\}")


def tool(name: str) -> str:
    """A command-line tool the set-up step installs; missing is a skip here, a failure in CI."""
    path = shutil.which(name) or shutil.which(name, path=str(Path(sys.executable).parent))
    if path is None:
        message = f"{name} is not installed (make setup / scripts/system-deps.sh install it)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return path


def env_example() -> dict[str, str]:
    pairs = {}
    for line in ENV_EXAMPLE.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, _, val = line.partition("=")
            pairs[key.strip()] = val.strip()
    return pairs


def interpolate(text: str, env: dict[str, str]) -> str:
    """Compose's variable interpolation (the subset these files use)."""

    def substitute(m: re.Match[str]) -> str:
        name, op, arg = m["name"], m["op"], m["arg"]
        val = env.get(name)
        unset = val is None or (val == "" and op is not None and op.startswith(":"))
        if op and op.endswith("?") and unset:
            raise AssertionError(f"{name} is required: {arg}")
        if op and op.endswith("-") and unset:
            return arg
        return val or ""

    return VARIABLE.sub(substitute, text.replace("$$", "\0")).replace("\0", "$")


def load_compose(path: Path, env: dict[str, str]) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(interpolate(path.read_text(), env))
    # Compose converts numeric strings of these fields after interpolation.
    for service in data.get("services", {}).values():
        for device in (
            service.get("deploy", {})
            .get("resources", {})
            .get("reservations", {})
            .get("devices", [])
        ):
            if isinstance(device.get("count"), str) and device["count"].isdigit():
                device["count"] = int(device["count"])
    return data


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    if not SCHEMA.is_file():
        pytest.skip(f"the compose-spec schema is not at {SCHEMA}")
    loaded: dict[str, Any] = json.loads(SCHEMA.read_text())
    return loaded


@pytest.mark.parametrize("env", ["defaults", "env.example"])
@pytest.mark.parametrize(
    "path", [ROOT_COMPOSE, *sorted(DEPLOY.glob("compose*.yaml"))], ids=lambda p: p.name
)
def test_compose_files_match_the_compose_spec(schema: dict[str, Any], path: Path, env: str):
    values = {} if env == "defaults" else env_example()
    jsonschema.validate(load_compose(path, values), schema)


def test_compose_wiring():
    compose = load_compose(COMPOSE, env_example())
    services = compose["services"]
    assert set(services) == {"judge", "prometheus", "grafana", "train"}
    # The training job is a profile (not started by `up`) writing where the judge reads.
    train = services["train"]
    assert train["profiles"] == ["train"]
    judge_models = next(v for v in services["judge"]["volumes"] if str(v).endswith(":/models:ro"))
    assert judge_models.removesuffix(":ro") in train["volumes"]
    judge = services["judge"]
    assert judge["build"] == {"context": "..", "dockerfile": "Dockerfile"}
    assert (
        DEPLOY / judge["build"]["context"] / judge["build"]["dockerfile"]
    ).resolve() == DOCKERFILE
    assert judge["restart"] == "unless-stopped"
    assert judge["env_file"] == [{"path": "../.env", "required": True}]
    assert judge["environment"]["REFLECTRM_HOST"] == "0.0.0.0"
    [gpu] = judge["deploy"]["resources"]["reservations"]["devices"]
    assert gpu["driver"] == "nvidia" and gpu["capabilities"] == ["gpu"]
    assert any(v.endswith(":/models:ro") for v in judge["volumes"])
    assert any(p.endswith(":8000") for p in judge["ports"])
    # Prometheus scrapes the judge by its service name and container port.
    prometheus_yml = yaml.safe_load((DEPLOY / "prometheus.yml").read_text())
    [job] = prometheus_yml["scrape_configs"]
    assert job["metrics_path"] == "/metrics"
    assert job["static_configs"] == [{"targets": ["judge:8000"]}]
    # Every file mounted from the repository exists, and Grafana gets its provisioning.
    for name in ("prometheus", "grafana"):
        for volume in services[name]["volumes"]:
            source = volume.split(":")[0]
            if source.startswith("./"):
                assert (DEPLOY / source).exists(), volume
    mounts = dict(v.split(":")[1::-1] for v in services["grafana"]["volumes"])
    assert (DEPLOY / mounts["/etc/grafana/provisioning"]).resolve() == PROVISIONING
    dashboards_folder = "/etc/grafana/dashboards"
    assert (DEPLOY / mounts[dashboards_folder]).resolve() == DASHBOARDS[0].parent
    home = services["grafana"]["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert (DASHBOARDS[0].parent / Path(home).relative_to(dashboards_folder)).is_file()
    # The root compose file includes this one with the root .env.
    root = load_compose(ROOT_COMPOSE, {})
    assert root["include"] == [{"path": "deploy/compose.yaml", "env_file": ".env"}]


def test_grafana_provisioning_and_dashboards():
    [datasource] = yaml.safe_load((PROVISIONING / "datasources" / "prometheus.yaml").read_text())[
        "datasources"
    ]
    assert datasource["type"] == "prometheus" and datasource["url"] == "http://prometheus:9090"
    [provider] = yaml.safe_load((PROVISIONING / "dashboards" / "reflectrm.yaml").read_text())[
        "providers"
    ]
    assert provider["options"]["path"] == "/etc/grafana/dashboards"
    assert DASHBOARDS
    for path in DASHBOARDS:
        dashboard = json.loads(path.read_text())
        assert dashboard["uid"] and dashboard["title"]
        ids = [p["id"] for p in dashboard["panels"]]
        assert len(ids) == len(set(ids)), f"{path.name}: duplicate panel ids"
        for panel in dashboard["panels"]:
            grid = panel["gridPos"]
            assert grid["x"] + grid["w"] <= 24, panel["title"]
            if panel["type"] == "row":
                continue
            assert panel["targets"], panel["title"]
            for target in [panel, *panel["targets"]]:
                assert target["datasource"] == {"type": "prometheus", "uid": datasource["uid"]}


def test_dashboard_queries_parse_as_promql(tmp_path: Path):
    """promtool checks each query's syntax (as a recording rule), with Grafana's variables set."""
    promtool = tool("promtool")
    rules = []
    for path in DASHBOARDS:
        for panel in json.loads(path.read_text())["panels"]:
            for target in panel.get("targets", []):
                expr = target["expr"]
                for variable in ("$__rate_interval", "$__interval", "$__range"):
                    expr = expr.replace(variable, "5m")
                rules.append({"record": f"panel:{len(rules)}", "expr": expr})
    file = tmp_path / "rules.yml"
    file.write_text(yaml.safe_dump({"groups": [{"name": "dashboards", "rules": rules}]}))
    result = subprocess.run([promtool, "check", "rules", str(file)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_prometheus_config_is_valid():
    promtool = tool("promtool")
    result = subprocess.run(
        [promtool, "check", "config", str(DEPLOY / "prometheus.yml")],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(
    "dockerfile", [DOCKERFILE, *sorted(DEPLOY.glob("*Dockerfile"))], ids=lambda p: p.name
)
def test_dockerfiles_pass_hadolint(dockerfile: Path):
    hadolint = tool("hadolint")
    result = subprocess.run(
        [hadolint, "--no-color", str(dockerfile)], capture_output=True, text=True, cwd=ROOT
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_dockerfile_contract():
    text = DOCKERFILE.read_text()
    users = re.findall(r"^USER\s+(\S+)", text, re.MULTILINE)
    assert users and users[-1].isdigit() and users[-1] != "0", "the service must not run as root"
    [healthcheck] = re.findall(r"^HEALTHCHECK .*?(?<!\\)$", text, re.MULTILINE | re.DOTALL)
    assert "/ready" in healthcheck
    # The image's vLLM pin is the `gpu` extra's.
    pyproject = (ROOT / "pyproject.toml").read_text()
    [gpu_pin] = re.findall(r'gpu = \["(vllm==[^"]+)"\]', pyproject)
    assert f'pip install "{gpu_pin}"' in text
    assert 'pip install ".[gpu]"' in text
    # .dockerignore keeps exactly what the Dockerfile copies.
    kept = {
        line[1:].rstrip("/")
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.startswith("!")
    }
    copied = {
        src for line in re.findall(r"^COPY (.+) \S+$", text, re.MULTILINE) for src in line.split()
    }
    assert copied <= kept, copied - kept


def test_env_example_matches_settings_and_compose():
    text = ENV_EXAMPLE.read_text()
    fields = {f"REFLECTRM_{name.upper()}" for name in Settings.model_fields}
    mentioned = set(re.findall(r"^#?\s*(REFLECTRM_[A-Z0-9_]+)=", text, re.MULTILINE))
    assert mentioned, "no settings in .env.example"
    assert mentioned <= fields, f"not settings: {mentioned - fields}"
    # Every compose variable is explained in .env.example.
    compose_vars = {m["name"] for m in VARIABLE.finditer(COMPOSE.read_text())}
    assert compose_vars <= set(env_example()), compose_vars - set(env_example())
    # And the file loads as the service's settings.
    settings = Settings(_env_file=ENV_EXAMPLE)  # type: ignore[call-arg]
    assert settings.model == "default" and 0 < settings.swap_check_fraction < 1
