-- GET /customers?limit=50: the first page of 50 customers of the department.
local common = require("common")

local prepared

function init(args)
  prepared = wrk.format("GET", common.prefix .. "/customers?limit=50", common.headers(nil))
end

function request()
  return prepared
end
