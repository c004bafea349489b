-- POST /graphql: the document in the file BENCH_QUERY_FILE with the variables BENCH_VARIABLES
-- (a JSON object, default {}), the same request every time, as a dashboard refreshing does.
-- A 200 whose body has "errors" counts as an error.
local common = require("common")
common.graphql = true

local prepared

function init(args)
  local query = common.read(common.required("BENCH_QUERY_FILE"))
  local variables = os.getenv("BENCH_VARIABLES") or "{}"
  local body = '{"query":' .. common.json_string(query) .. ',"variables":' .. variables .. '}'
  prepared = wrk.format("POST", os.getenv("BENCH_GRAPHQL_PATH") or "/graphql",
    common.headers("application/json"), body)
end

function request()
  return prepared
end
