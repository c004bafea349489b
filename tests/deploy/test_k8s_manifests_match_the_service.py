"""What deploy/k8s names exists in the service: each container's command is a `dealbase` command
with options it has, each probe asks a route the API serves through the pod's proxy, whose
configuration leads to the port the API's settings give, each variable is a setting (or one the
service reads besides) with a value it accepts, and the times the pods are given fit the
service's own (its shutdown timeout, a worker's visit) and the proxy's drain."""

from __future__ import annotations

import ipaddress
import re
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import pytest
import typer
import typer.main
import uvicorn
import yaml
from pydantic import ValidationError
from starlette.routing import Match
from typer.core import TyperGroup

from dealbase.app import create_app
from dealbase.config import Settings
from dealbase.ops import cli
from dealbase.ops.metrics_files import MULTIPROCESS_DIR
from dealbase.ops.serving import DRAIN_SECONDS
from dealbase.worker.limits import WorkerLimits
from dealbase.worker.sending import TIMEOUT_SECONDS
from tests.deploy.k8s import (
    Container,
    all_containers,
    config_map_data,
    containers,
    environment_of,
    generated_config_maps,
    manifests,
    named,
    proxy_container,
    secret_data,
    settings_of,
)
from tests.deploy.proxy import directive

DOCKERFILE = Path(__file__).resolve().parents[2] / "deploy" / "Dockerfile"
SETTING_PREFIX = str(Settings.model_config["env_prefix"])
SETTING_VARIABLES = {SETTING_PREFIX + field.upper(): field for field in Settings.model_fields}
# uvicorn's, read by the Config that `dealbase serve` builds: the proxies it trusts.
TRUSTED_PROXIES = "FORWARDED_ALLOW_IPS"


def _parsed(command_line: list[str]) -> tuple[list[str], dict[str, Any]]:
    """The `dealbase` (sub)command a command line runs and its options, parsed by the CLI's own
    parser: an unknown command or option, or a value out of range, raises a usage error."""
    assert command_line[:1] == ["dealbase"], f"{command_line} does not run dealbase"
    command = typer.main.get_command(cli.cli)
    context = command.make_context("dealbase", command_line[1:])
    words = command_line[1:]
    path: list[str] = []
    while isinstance(command, TyperGroup):
        name, found, words = command.resolve_command(context, words)
        assert name is not None and found is not None, f"no dealbase command in {command_line}"
        path.append(name)
        command = found
        context = command.make_context(name, list(words), parent=context)
    return path, context.params


def _runs(container: Container) -> str:
    return " ".join(_parsed(container.command_line)[0])


def _api_port(container: Container) -> int:
    port: int = _parsed(container.command_line)[1]["port"] or settings_of(container).port
    return port


def _probes(container: Container) -> dict[str, dict[str, Any]]:
    return {
        kind: container.spec[kind]
        for kind in ("startupProbe", "livenessProbe", "readinessProbe")
        if kind in container.spec
    }


def _port_number(container: Container, port: int | str) -> int:
    return container.ports[port] if isinstance(port, str) else port


def _serves_get(settings: Settings, path: str) -> bool:
    # The log settings do not change the routes; a JSON format would reconfigure this process's.
    app = create_app(settings.model_copy(update={"log_format": "console"}))
    request = {"type": "http", "method": "GET", "path": path, "root_path": ""}
    return any(route.matches(request)[0] is Match.FULL for route in app.routes)


def _api() -> Container:
    (api,) = [container for container in containers() if _runs(container) == "serve"]
    return api


def _proxy_config() -> str:
    """The configuration the proxy runs: the file its ConfigMap mounts at nginx's own path."""
    proxy = proxy_container()
    (mount,) = [
        mount
        for mount in proxy.spec["volumeMounts"]
        if mount["mountPath"] == "/etc/nginx/nginx.conf"
    ]
    volumes = {volume["name"]: volume for volume in proxy.pod["volumes"]}
    data = config_map_data(volumes[mount["name"]]["configMap"]["name"])
    return data[mount["subPath"]]


def _seconds(value: str) -> int:
    assert value.endswith("s"), value
    return int(value[:-1])


def _pre_stop_pause_seconds(container: Container) -> int:
    pause = container.spec["lifecycle"]["preStop"]["exec"]["command"]
    assert pause[0] == "sleep" and len(pause) == 2, f"{container}: preStop is not a pause: {pause}"
    return int(pause[1])


def _selects(selector: dict[str, str], container: Container) -> bool:
    return selector.items() <= container.pod_labels.items()


def _config_sources() -> list[dict[str, str]]:
    """The data of every ConfigMap and Secret but those generated from files (the proxy's)."""
    files = {manifest["metadata"]["name"] for _, manifest in generated_config_maps()}
    sources = []
    for _, manifest in manifests():
        if manifest["kind"] == "ConfigMap" and manifest["metadata"]["name"] not in files:
            sources.append(config_map_data(manifest["metadata"]["name"]))
        elif manifest["kind"] == "Secret":
            sources.append(secret_data(manifest["metadata"]["name"]))
    return sources


def _variable_names() -> set[str]:
    """Every variable the manifests name: keys of the ConfigMaps and Secrets, and env entries."""
    names = {variable for data in _config_sources() for variable in data}
    return names | {
        variable["name"] for container in containers() for variable in container.spec.get("env", [])
    }


def _all_variables() -> dict[str, set[str]]:
    """Every variable the manifests set, with the values they give it: those of the ConfigMaps
    and Secrets (whatever takes them), and those written in a container's env."""
    given: dict[str, set[str]] = {}
    written = [
        {variable["name"]: variable["value"]}
        for container in containers()
        for variable in container.spec.get("env", [])
        if "value" in variable
    ]
    for data in [*_config_sources(), *written]:
        for variable, value in data.items():
            given.setdefault(variable, set()).add(value)
    return given


def test_the_dealbase_command_is_the_packages_cli() -> None:
    (script,) = entry_points(group="console_scripts", name="dealbase")

    assert script.value == "dealbase.ops.cli:main"


@pytest.mark.parametrize("container", containers(), ids=str)
def test_each_container_runs_a_dealbase_command_with_options_it_has(container: Container) -> None:
    try:
        _parsed(container.command_line)
    except typer.TyperException as refused:
        pytest.fail(f"{container}: {container.command_line}: {refused.format_message()}")


def test_the_manifests_run_the_api_the_webhook_worker_and_the_migration_once_each() -> None:
    assert sorted(_runs(container) for container in containers()) == ["migrate", "serve", "worker"]


@pytest.mark.parametrize("container", containers(), ids=str)
def test_http_probes_ask_get_routes_of_the_api_through_the_proxys_port(
    container: Container,
) -> None:
    probes = _probes(container)
    if _runs(container) != "serve":
        assert not probes, f"{container} serves no HTTP to probe: {sorted(probes)}"
        return
    assert set(probes) == {"startupProbe", "livenessProbe", "readinessProbe"}
    assert probes["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert probes["livenessProbe"]["httpGet"]["path"] == "/healthz"
    for kind, probe in probes.items():
        asked = probe["httpGet"]
        assert _serves_get(settings_of(container), asked["path"]), f"{kind}: no GET {asked['path']}"
        assert _port_number(container, asked["port"]) == proxy_container().ports["http"], kind


def _proxied_to(listened: str) -> tuple[str, int]:
    """Where the proxy's server listening on ``listened`` sends its requests: its upstream's
    server, or its proxy_pass address."""
    config = _proxy_config()
    servers = config.split("\n    server {")[1:]
    (server,) = [text for text in servers if f"listen {listened}" in text]
    (target,) = directive("proxy_pass", server)[:1]
    address = target.removeprefix("http://")
    if ":" not in address:
        # The upstream's one server (a "server {" block is no address).
        (address,) = re.findall(r"^\s*server\s+([\w.-]+:\d+);", config, flags=re.MULTILINE)
    host, port = address.split(":")
    return host, int(port)


def test_the_proxy_listens_on_its_ports_and_passes_to_the_apis_own_on_the_pods_loopback() -> None:
    api = _api()
    proxy = proxy_container()
    settings = settings_of(api)
    aliases = {name: alias["ip"] for alias in api.pod["hostAliases"] for name in alias["hostnames"]}

    for name, port in proxy.ports.items():
        # On every address of the pod: the kubelet, the Service and Prometheus reach it there.
        assert any(value.split()[0] == str(port) for value in directive("listen", _proxy_config()))
        host, to = _proxied_to(str(port))
        assert aliases[host] == settings.host, f"the proxy's {name} port reaches {host}"
        assert to == (settings.port if name == "http" else settings.metrics_port), name
    assert _api_port(api) == settings.port


def test_the_proxy_runs_the_shipped_file_with_its_writable_paths_on_a_volume() -> None:
    proxy = proxy_container()
    volumes = {volume["name"]: volume for volume in proxy.pod["volumes"]}
    writable = [
        mount["mountPath"]
        for mount in proxy.spec["volumeMounts"]
        if "emptyDir" in volumes[mount["name"]]
    ]
    config = _proxy_config()
    paths = [
        *directive("pid", config),
        *(value for value in re.findall(r"_temp_path\s+([^;]+);", config)),
    ]

    assert config == (DOCKERFILE.parent / "nginx" / "nginx.conf").read_text()
    assert proxy.spec["image"] == "nginx:" + _compose_proxy_tag()
    for path in paths:
        assert any(Path(path).is_relative_to(folder) for folder in writable), path


def _compose_proxy_tag() -> str:
    compose = yaml.safe_load((DOCKERFILE.parent / "compose.yaml").read_text())
    image: str = compose["services"]["proxy"]["image"]
    return image.removeprefix("nginx:")


def test_the_readiness_probe_waits_as_long_as_readyz_may_take() -> None:
    api = _api()
    settings = settings_of(api)
    # /readyz asks PostgreSQL (within the acquire timeout) and Redis (within its own) at once.
    slowest_check_seconds = max(settings.db_acquire_timeout_ms, settings.redis_timeout_ms) / 1000

    assert api.spec["readinessProbe"]["timeoutSeconds"] > slowest_check_seconds


@pytest.mark.parametrize("container", containers(), ids=str)
def test_container_ports_are_those_the_settings_give(container: Container) -> None:
    settings = settings_of(container)
    expected: dict[str, int] = {}
    if _runs(container) == "worker" and settings.metrics_port is not None:
        expected["metrics"] = settings.metrics_port

    assert container.ports == expected
    if _runs(container) == "serve":
        # Only the pod's proxy reaches it: the proxy has the pod's ports.
        assert ipaddress.ip_address(settings.host).is_loopback, f"{container}: {settings.host}"
        ports = proxy_container().ports
    else:
        ports = expected
    if expected:
        # The kubelet, the Service and Prometheus reach the pod on its own address.
        assert ipaddress.ip_address(settings.host).is_unspecified, f"{container}: {settings.host}"
    annotations = container.workload["spec"]["template"]["metadata"].get("annotations", {})
    if "prometheus.io/port" in annotations:
        assert int(annotations["prometheus.io/port"]) == ports.get("metrics")


def test_the_service_routes_to_ports_of_the_api_pods() -> None:
    service = named("Service", "dealbase-api")
    api = _api()

    pod_ports = {
        name: number
        for container in all_containers()
        if container.workload["metadata"]["name"] == api.workload["metadata"]["name"]
        for name, number in container.ports.items()
    }

    assert _selects(service["spec"]["selector"], api), "the Service selects no API pod"
    for port in service["spec"]["ports"]:
        assert port["targetPort"] in pod_ports, f"the API pods have no port {port['targetPort']}"
    assert pod_ports == proxy_container().ports, "a port of the API pods is not the proxy's"


def test_the_autoscaler_and_the_disruption_budget_act_on_the_api_pods() -> None:
    api = _api()
    target = named("HorizontalPodAutoscaler", "dealbase-api")["spec"]["scaleTargetRef"]
    budget = named("PodDisruptionBudget", "dealbase-api")["spec"]["selector"]["matchLabels"]

    assert (target["kind"], target["name"]) == ("Deployment", api.workload["metadata"]["name"])
    assert "replicas" not in api.workload["spec"], "an apply would undo the autoscaler's count"
    assert _selects(budget, api), "the disruption budget selects no API pod"
    assert _selects(api.workload["spec"]["selector"]["matchLabels"], api)


@pytest.mark.parametrize("container", containers(), ids=str)
def test_each_variable_a_container_takes_from_a_config_map_or_secret_is_there(
    container: Container,
) -> None:
    container.environment()


def test_every_dealbase_variable_is_a_setting() -> None:
    unknown = {
        variable
        for variable in _variable_names()
        if variable.startswith(SETTING_PREFIX) and variable not in SETTING_VARIABLES
    }

    assert not unknown, f"not settings (config.py ignores them): {sorted(unknown)}"


def test_the_settings_read_each_variable_by_its_field_name() -> None:
    # SETTING_VARIABLES assumes the prefix and the field's name: an alias would read another.
    assert all(
        field.alias is None and field.validation_alias is None
        for field in Settings.model_fields.values()
    )


@pytest.mark.parametrize(
    "variable", sorted(variable for variable in _variable_names() if variable in SETTING_VARIABLES)
)
def test_each_value_the_manifests_give_a_setting_is_accepted(variable: str) -> None:
    for value in _all_variables()[variable]:
        with environment_of({variable: value}):
            try:
                Settings()
            except ValidationError as refused:
                pytest.fail(f"{variable}={value!r}: {refused.errors()[0]['msg']}")


@pytest.mark.parametrize("container", containers(), ids=str)
def test_each_container_starts_with_settings_that_load(container: Container) -> None:
    try:
        settings_of(container)
    except ValidationError as refused:
        pytest.fail(f"{container}: {refused}")


def test_every_other_variable_is_one_the_service_or_uvicorn_reads() -> None:
    others = {variable for variable in _variable_names() if variable not in SETTING_VARIABLES}

    assert others <= {MULTIPROCESS_DIR, TRUSTED_PROXIES}, sorted(others)


def test_the_trusted_proxies_are_networks_uvicorn_reads() -> None:
    for proxies in _all_variables().get(TRUSTED_PROXIES, set()):
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv(TRUSTED_PROXIES, proxies)
            assert uvicorn.Config("dealbase.app:create_app").forwarded_allow_ips == proxies
        # uvicorn takes an entry that is no address or network for a literal host name, and
        # trusts nothing by it, without a word.
        for entry in proxies.split(","):
            ipaddress.ip_network(entry.strip())


def test_the_api_trusts_the_proxys_forwarded_for() -> None:
    trusted = _api().environment()[TRUSTED_PROXIES].split(",")

    assert any(
        ipaddress.ip_address("127.0.0.1") in ipaddress.ip_network(entry.strip())
        for entry in trusted
    )


def test_the_api_outlives_the_proxys_pause_and_drain() -> None:
    proxy_pause = _pre_stop_pause_seconds(proxy_container())
    (drain,) = [_seconds(value) for value in directive("worker_shutdown_timeout", _proxy_config())]

    assert proxy_pause > 0
    assert _pre_stop_pause_seconds(_api()) > proxy_pause + drain
    # The proxy ends live connections no later than the API would end them at its shutdown.
    assert drain <= settings_of(_api()).shutdown_timeout_seconds


def test_the_api_pods_grace_period_outlasts_the_pause_and_the_graceful_shutdown() -> None:
    api = _api()
    pause = _pre_stop_pause_seconds(api)
    shutdown = settings_of(api).shutdown_timeout_seconds

    assert pause > 0
    assert api.pod["terminationGracePeriodSeconds"] > pause + shutdown + DRAIN_SECONDS


def test_the_worker_pods_grace_period_outlasts_a_visit_and_its_last_request() -> None:
    (worker,) = [container for container in containers() if _runs(container) == "worker"]
    visit = WorkerLimits().visit_budget.total_seconds() + TIMEOUT_SECONDS

    assert worker.pod["terminationGracePeriodSeconds"] > visit


@pytest.mark.parametrize("container", all_containers(), ids=str)
def test_pods_run_as_the_images_unprivileged_user_on_a_read_only_root(
    container: Container,
) -> None:
    found = re.search(r"useradd .*--uid (\d+)", DOCKERFILE.read_text())
    assert found, "deploy/Dockerfile creates no user with a uid"
    pod = container.pod["securityContext"]
    own = container.spec["securityContext"]

    assert pod["runAsNonRoot"] is True
    assert pod["runAsUser"] == int(found.group(1))
    assert own["readOnlyRootFilesystem"] is True
    assert own["allowPrivilegeEscalation"] is False


def test_the_api_writes_its_metrics_files_to_a_volume() -> None:
    api = _api()
    folder = api.environment()[MULTIPROCESS_DIR]
    volumes = {volume["name"]: volume for volume in api.pod.get("volumes", [])}
    mounts = [
        mount
        for mount in api.spec.get("volumeMounts", [])
        if Path(folder).is_relative_to(mount["mountPath"])
    ]

    assert mounts, f"{folder} is on the read-only root"
    assert "emptyDir" in volumes[mounts[0]["name"]]
