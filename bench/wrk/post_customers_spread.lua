-- POST /customers, each request as one of many tenants picked at random (bench/scale.py).
-- BENCH_KEYS_FILE has one line per tenant: "<api key> <department id>". The one-tenant run
-- uses the same script with a file of one line, so both runs cost wrk the same.
local common = require("common")

local body = '{"last_name": "Lovelace", "first_name": "Ada", "email": "ada@example.com",'
  .. ' "company": "Analytical Engines Ltd", "city": "London"}'
local tenants = {}

function init(args)
  for _, line in ipairs(common.lines(common.required("BENCH_KEYS_FILE"))) do
    local key, department = line:match("^(%S+) (%S+)$")
    tenants[#tenants + 1] = {
      ["X-Api-Key"] = key,
      ["X-Department-Id"] = department,
      ["Content-Type"] = "application/json",
    }
  end
  math.randomseed(os.time() + (thread_index or 0) * 7919)
end

function request()
  return wrk.format("POST", common.prefix .. "/customers", tenants[math.random(#tenants)], body)
end
