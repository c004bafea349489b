-- GET BENCH_PATH (under the REST prefix, with its query), the same request again and again.
local common = require("common")

local prepared

function init(args)
  prepared = wrk.format("GET", common.prefix .. common.required("BENCH_PATH"), common.headers(nil))
end

function request()
  return prepared
end
