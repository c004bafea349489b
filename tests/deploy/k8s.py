"""The Kubernetes manifests of deploy/k8s as the tests read them: the files the kustomization
lists, their containers, and what each container is given (its environment, its command)."""

from __future__ import annotations

import base64
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from dealbase.config import Settings

K8S_DIR = Path(__file__).resolve().parents[2] / "deploy" / "k8s"
KUSTOMIZATION = K8S_DIR / "kustomization.yaml"

Manifest = dict[str, Any]


def _resources() -> list[Path]:
    kustomization = yaml.safe_load(KUSTOMIZATION.read_text())
    return [(K8S_DIR / name).resolve() for name in kustomization["resources"]]


def listed_files() -> list[Path]:
    """The files of the folder ``kubectl apply -k deploy/k8s`` applies, in the kustomization's
    order."""
    return [path for path in _resources() if path.is_file()]


def generated_config_maps() -> list[tuple[Path, Manifest]]:
    """The ConfigMaps the kustomizations of the folders it lists generate from files (the
    proxy's, from deploy/nginx), as kustomize writes them but for its hash suffix, which it also
    gives every reference to them."""
    generated = []
    for folder in (path for path in _resources() if path.is_dir()):
        kustomization = folder / "kustomization.yaml"
        for generator in yaml.safe_load(kustomization.read_text()).get("configMapGenerator", []):
            data = {name: (folder / name).read_text() for name in generator["files"]}
            metadata = {"name": generator["name"]}
            generated.append(
                (
                    kustomization,
                    {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": data},
                )
            )
    return generated


def manifests() -> list[tuple[Path, Manifest]]:
    written = [
        (path, document)
        for path in listed_files()
        for document in yaml.safe_load_all(path.read_text())
        if document
    ]
    return written + generated_config_maps()


def named(kind: str, name: str) -> Manifest:
    found = [
        manifest
        for _, manifest in manifests()
        if manifest["kind"] == kind and manifest["metadata"]["name"] == name
    ]
    assert len(found) == 1, f"{len(found)} {kind} named {name} in deploy/k8s"
    return found[0]


@dataclass(frozen=True)
class Container:
    path: Path
    workload: Manifest
    spec: Manifest

    @property
    def pod(self) -> Manifest:
        pod: Manifest = self.workload["spec"]["template"]["spec"]
        return pod

    @property
    def pod_labels(self) -> dict[str, str]:
        labels: dict[str, str] = self.workload["spec"]["template"]["metadata"]["labels"]
        return labels

    @property
    def command_line(self) -> list[str]:
        return [*self.spec.get("command", []), *self.spec.get("args", [])]

    @property
    def ports(self) -> dict[str, int]:
        return {port["name"]: port["containerPort"] for port in self.spec.get("ports", [])}

    def __str__(self) -> str:
        return f"{self.path.name}: {self.workload['kind']} {self.workload['metadata']['name']}"

    def environment(self) -> dict[str, str]:
        """The variables the container starts with, as the kubelet sets them: ``envFrom`` in
        order, then ``env`` over them."""
        variables: dict[str, str] = {}
        for source in self.spec.get("envFrom", []):
            if "configMapRef" in source:
                variables |= config_map_data(source["configMapRef"]["name"])
            else:
                variables |= secret_data(source["secretRef"]["name"])
        for variable in self.spec.get("env", []):
            variables[variable["name"]] = _value_of(variable)
        return variables


def all_containers() -> list[Container]:
    """Every container of the Deployments and Jobs: dealbase's and the API pods' proxy."""
    return [
        Container(path, manifest, container)
        for path, manifest in manifests()
        if manifest["kind"] in ("Deployment", "Job")
        for container in manifest["spec"]["template"]["spec"]["containers"]
    ]


def containers() -> list[Container]:
    """The containers that run a ``dealbase`` command (the image deploy/Dockerfile builds)."""
    return [container for container in all_containers() if container.spec["image"] == "dealbase"]


def proxy_container() -> Container:
    """The API pods' proxy (deploy/nginx/nginx.conf)."""
    (proxy,) = [container for container in all_containers() if container.spec["name"] == "proxy"]
    return proxy


def config_map_data(name: str) -> dict[str, str]:
    data: dict[str, str] = named("ConfigMap", name)["data"]
    return data


def secret_data(name: str) -> dict[str, str]:
    secret = named("Secret", name)
    decoded = {
        key: base64.b64decode(value).decode() for key, value in secret.get("data", {}).items()
    }
    # The API server writes stringData over data.
    plain: dict[str, str] = secret.get("stringData", {})
    return decoded | plain


def _value_of(variable: Manifest) -> str:
    if "value" in variable:
        value: str = variable["value"]
        return value
    reference = variable["valueFrom"]
    if "secretKeyRef" in reference:
        key = reference["secretKeyRef"]
        data = secret_data(key["name"])
    else:
        key = reference["configMapKeyRef"]
        data = config_map_data(key["name"])
    assert key["key"] in data, f"{key['name']} has no key {key['key']}"
    return data[key["key"]]


@contextmanager
def environment_of(variables: dict[str, str]) -> Iterator[None]:
    """This process's environment holding ``variables`` and no other ``DEALBASE_`` variable, as
    a container's would."""
    with pytest.MonkeyPatch.context() as patch:
        for name in [name for name in os.environ if name.startswith("DEALBASE_")]:
            patch.delenv(name)
        for name, value in variables.items():
            patch.setenv(name, value)
        yield


def settings_of(container: Container) -> Settings:
    """The settings the container's ``dealbase`` reads from its environment."""
    with environment_of(container.environment()):
        return Settings()
