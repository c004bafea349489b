-- POST /customers: one new customer per request, the same body every time.
local common = require("common")

local body = '{"last_name": "Lovelace", "first_name": "Ada", "email": "ada@example.com",'
  .. ' "company": "Analytical Engines Ltd", "city": "London"}'
local prepared

function init(args)
  prepared = wrk.format("POST", common.prefix .. "/customers",
    common.headers("application/json"), body)
end

function request()
  return prepared
end
