"""deploy/k8s is valid Kubernetes: each manifest against the API schemas of every Kubernetes
version kubernetes-validate bundles (strict: a field the API does not have is an error), offline,
and the kustomization applies every manifest of the folder."""

from __future__ import annotations

import kubernetes_validate
import pytest
from kubernetes_validate.utils import all_versions
from packaging.version import Version

from tests.deploy.k8s import K8S_DIR, KUSTOMIZATION, listed_files, manifests

KUBERNETES_VERSIONS = sorted(set(all_versions()), key=Version)


def test_the_kustomization_applies_every_manifest_of_the_folder() -> None:
    in_folder = {path for path in K8S_DIR.glob("*.y*ml") if path != KUSTOMIZATION}

    assert set(listed_files()) == in_folder


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_every_manifest_is_valid_against_the_kubernetes_api_schemas(version: str) -> None:
    errors = []
    for path, manifest in manifests():
        where = f"{path.name} {manifest['kind']} {manifest['metadata']['name']}"
        try:
            kubernetes_validate.validate(manifest, version, strict=True)
        except kubernetes_validate.ValidationError as invalid:
            field = ".".join(str(part) for part in invalid.path)
            errors.append(f"{where}: {field}: {invalid.message}")
        except kubernetes_validate.SchemaNotFoundError as unknown:
            errors.append(f"{where}: {unknown.message}")

    assert not errors, "\n".join(errors)
