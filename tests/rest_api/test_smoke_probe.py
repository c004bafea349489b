from fastapi.testclient import TestClient

from tests.support import TenantWorld


def test_probe(client: TestClient, world: TenantWorld) -> None:
    response = client.post("/api/v1/integration/customers", json={"last_name": "X"}, headers=world.key.headers)
    assert response.status_code == 201, response.text
