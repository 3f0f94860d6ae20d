"""The Dockerfile, the compose example and the Kubernetes sidecar agree with the code: ports,
probe and healthcheck paths, the config location, non-root, grace periods longer than
overspill's own. (No image is built here; these check what can be checked without one.)"""

from __future__ import annotations

import re
import shlex
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from kernel.config import GeneralSettings, Settings
from kernel.config_loading import parse_config
from kernel.store import DiskHistoryStore
from proxy.app import create_app
from proxy.system import build_system

ROOT = Path(__file__).resolve().parents[1]
PORT = 4000
SECRETS = {"OPENAI_API_KEY": "sk-x", "ANTHROPIC_API_KEY": "sk-y", "OVERSPILL_MASTER_KEY": "sk-m"}


def dockerfile() -> dict[str, list[str]]:
    """Each Dockerfile instruction's arguments, continuation lines joined."""
    text = re.sub(r"\\\n", " ", (ROOT / "Dockerfile").read_text())
    found: dict[str, list[str]] = {}
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            word, _, rest = line.strip().partition(" ")
            found.setdefault(word.upper(), []).append(rest.strip())
    return found


async def route_paths(tmp_path: Path) -> set[str]:
    """Every path the app serves."""
    settings = parse_config("model_list: [{model_name: m, litellm_params: {model: openai/m}}]",
                            "config.yaml", {}).settings  # fmt: skip
    store = DiskHistoryStore(tmp_path / "store")
    system = build_system(settings, store=store)
    app = create_app(system, reload=None)
    await system.aclose()
    return {route.path for route in app.routes}  # type: ignore[attr-defined]


def config_of(text: str) -> Settings:
    return parse_config(text, "config.yaml", SECRETS).settings


def test_the_image_runs_as_a_non_root_user_on_the_served_port() -> None:
    """USER is not root; EXPOSE and the CMD's port are the default port; the config path is
    where the examples mount it; every package of pyproject is copied in."""
    image = dockerfile()
    assert image["USER"][-1] not in {"root", "0"}
    assert image["EXPOSE"] == [str(PORT)]
    assert GeneralSettings().port == PORT
    command = yaml.safe_load(image["CMD"][-1])
    assert command[:2] == ["overspill", "serve"]
    assert command[command.index("--port") + 1] == str(PORT)
    assert command[command.index("--host") + 1] == "0.0.0.0"
    assert "OVERSPILL_CONFIG=/etc/overspill/config.yaml" in image["ENV"][0]
    found = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    packages = {pattern.rstrip("*") for pattern in found["packages"]["find"]["include"]}
    copied = {shlex.split(line)[0] for line in image["COPY"]}
    assert set(packages) <= copied


async def test_the_healthcheck_asks_a_real_route(tmp_path: Path) -> None:
    """The HEALTHCHECK's URL is the liveness route on the exposed port."""
    (check,) = dockerfile()["HEALTHCHECK"]
    url = re.search(r"http://127\.0\.0\.1:(\d+)(/[\w/]+)", check)
    assert url is not None
    assert int(url[1]) == PORT
    assert url[2] == "/health/liveness"
    assert url[2] in await route_paths(tmp_path)


def test_the_compose_sidecar_matches_the_image() -> None:
    """The compose file parses; the app reaches overspill's port; the stop grace period is
    longer than overspill's own; its config is valid."""
    compose = yaml.safe_load((ROOT / "examples/sidecar/docker-compose.yml").read_text())
    overspill = compose["services"]["overspill"]
    assert overspill["expose"] == [str(PORT)]
    assert f"http://overspill:{PORT}/v1" in compose["services"]["app"]["command"]
    (mount,) = [v for v in overspill["volumes"] if "config.yaml" in v]
    assert mount.split(":")[1] == "/etc/overspill/config.yaml"
    config = config_of((ROOT / "examples/sidecar/config.yaml").read_text())
    stop = int(overspill["stop_grace_period"].removesuffix("s"))
    assert stop > config.general_settings.graceful_shutdown_seconds


@pytest.fixture(scope="module")
def kubernetes() -> dict[str, dict[str, Any]]:
    """The sidecar manifest's documents by kind."""
    text = (ROOT / "examples/kubernetes/overspill-sidecar.yaml").read_text()
    return {doc["kind"]: doc for doc in yaml.safe_load_all(text)}


def sidecar(manifest: dict[str, dict[str, Any]]) -> dict[str, Any]:
    (container,) = manifest["Deployment"]["spec"]["template"]["spec"]["initContainers"]
    return container  # type: ignore[no-any-return]


async def test_the_kubernetes_probes_ask_real_routes_on_the_served_port(
    kubernetes: dict[str, dict[str, Any]], tmp_path: Path
) -> None:
    """Liveness, readiness and startup probes name routes the app serves, on its port; the
    app container is pointed at that port on localhost."""
    container = sidecar(kubernetes)
    assert container["restartPolicy"] == "Always"  # a native sidecar: stops after the app
    (port,) = container["ports"]
    assert port["containerPort"] == PORT
    args = container["args"]
    assert args[args.index("--port") + 1] == str(PORT)
    paths = await route_paths(tmp_path)
    probes = {
        kind: container[kind]["httpGet"]
        for kind in ("livenessProbe", "readinessProbe", "startupProbe")
    }
    assert probes["livenessProbe"]["path"] == "/health/liveness"
    assert probes["readinessProbe"]["path"] == "/health/readiness"
    for probe in probes.values():
        assert probe["path"] in paths
        assert probe["port"] == port["name"]
    (app,) = kubernetes["Deployment"]["spec"]["template"]["spec"]["containers"]
    env = {item["name"]: item for item in app["env"]}
    assert env["OPENAI_BASE_URL"]["value"] == f"http://127.0.0.1:{PORT}/v1"


def test_the_kubernetes_config_and_keys_come_from_a_configmap_and_a_secret(
    kubernetes: dict[str, dict[str, Any]],
) -> None:
    """The ConfigMap's config.yaml is valid and mounted where the image reads it; every
    `os.environ/` it names comes from the Secret; the pod's grace period is longer than
    overspill's; overspill runs as a non-root user."""
    pod = kubernetes["Deployment"]["spec"]["template"]["spec"]
    container = sidecar(kubernetes)
    text = kubernetes["ConfigMap"]["data"]["config.yaml"]
    config = config_of(text)
    named = set(re.findall(r"os\.environ/(\w+)", text))
    from_secret = {
        item["name"]
        for item in container["env"]
        if item["valueFrom"]["secretKeyRef"]["name"] == kubernetes["Secret"]["metadata"]["name"]
    }
    assert named <= from_secret
    assert from_secret <= set(kubernetes["Secret"]["stringData"])
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == "config"]
    assert mount["mountPath"] == "/etc/overspill"  # the whole directory: updates reach the file
    (volume,) = [v for v in pod["volumes"] if v["name"] == "config"]
    assert volume["configMap"]["name"] == kubernetes["ConfigMap"]["metadata"]["name"]
    assert pod["terminationGracePeriodSeconds"] > config.general_settings.graceful_shutdown_seconds
    assert container["securityContext"]["runAsUser"] != 0
    assert pod["securityContext"]["runAsNonRoot"] is True
    store = Path(config.general_settings.store.path)
    writable = {m["mountPath"] for m in container["volumeMounts"] if not m.get("readOnly")}
    assert any(store.is_relative_to(path) for path in writable)
