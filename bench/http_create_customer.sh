#!/usr/bin/env bash
# Throughput of POST /api/v1/integration/customers on a real server, measured with wrk.
#
#   bench/http_create_customer.sh [SERVER_URL_OF_POSTGRES] [SECONDS] [CONNECTIONS] [WORKERS]
#
# Creates a scratch database on the PostgreSQL server (default: the local one), migrates it,
# makes a tenant, department and key (with limits far above the load) through the CLI, serves
# with `dealbase serve --workers N` on a free port, loads it with wrk from this machine, prints
# wrk's figures, then stops the server and drops the database. Needs wrk (apt-get install wrk).
set -euo pipefail
cd "$(dirname "$0")/.."
server="${1:-postgresql://postgres@127.0.0.1:5432/postgres}"
seconds="${2:-10}"
connections="${3:-32}"
workers="${4:-2}"
dealbase=.venv/bin/dealbase
database="dealbase_bench_$$"
port=$(.venv/bin/python -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')

psql "$server" -qc "CREATE DATABASE $database" >/dev/null
export DEALBASE_DATABASE_URL="${server%/*}/$database"
export DEALBASE_LOG_LEVEL=warning DEALBASE_RATE_LIMIT_TENANT=100000/s DEALBASE_RATE_LIMIT_TENANT_BURST=1000000
cleanup() {
  [[ -n "${server_pid:-}" ]] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null || true
  psql "$server" -qc "DROP DATABASE IF EXISTS $database WITH (FORCE)" >/dev/null
}
trap cleanup EXIT

$dealbase migrate --json >/dev/null
tenant=$($dealbase tenant create bench --json | .venv/bin/python -c 'import json,sys; print(json.load(sys.stdin)["id"])')
department=$($dealbase department create --tenant "$tenant" Sales --json | .venv/bin/python -c 'import json,sys; print(json.load(sys.stdin)["id"])')
api_key=$($dealbase key issue --tenant "$tenant" --department "$department" --rate 100000/s --burst 1000000 --json | .venv/bin/python -c 'import json,sys; print(json.load(sys.stdin)["api_key"])')

$dealbase serve --port "$port" --workers "$workers" &
server_pid=$!
for _ in $(seq 1 100); do curl -sf "http://127.0.0.1:$port/openapi.json" >/dev/null && break; sleep 0.1; done

script=$(mktemp --suffix=.lua)
cat > "$script" <<LUA
wrk.method = "POST"
wrk.body = '{"last_name": "Lovelace", "first_name": "Ada", "email": "ada@example.com"}'
wrk.headers["Content-Type"] = "application/json"
wrk.headers["X-Api-Key"] = "$api_key"
wrk.headers["X-Department-Id"] = "$department"
LUA
echo "POST /customers: $workers workers, $connections connections, ${seconds}s, $(nproc) cores"
wrk -t2 -c"$connections" -d"${seconds}s" --latency -s "$script" "http://127.0.0.1:$port/api/v1/integration/customers"
rm -f "$script"
