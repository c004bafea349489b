-- GET /deals?limit=50: the first 50 deals with their customers, the dashboard's data through REST.
local common = require("common")

local prepared

function init(args)
  prepared = wrk.format("GET", common.prefix .. "/deals?limit=50", common.headers(nil))
end

function request()
  return prepared
end
