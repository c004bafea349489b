-- POST /customers, the requests of each connection going round the departments of
-- BENCH_KEYS_FILE (one line per department: "<api key> <department id>"), each request prepared
-- once, as post_customers.lua prepares its one. With a file of one line it costs wrk what
-- post_customers.lua does, so one department and eight are measured by the same script.
-- BENCH_BODY_FILE, when set, holds the body to send instead of the one below
-- (bench/custom_fields.py: the same customer with custom fields).
local common = require("common")

local body = '{"last_name": "Lovelace", "first_name": "Ada", "email": "ada@example.com",'
  .. ' "company": "Analytical Engines Ltd", "city": "London"}'
local prepared = {}
local next_one = 1

function init(args)
  local body_file = os.getenv("BENCH_BODY_FILE")
  if body_file ~= nil and body_file ~= "" then
    body = common.read(body_file)
  end
  for _, line in ipairs(common.lines(common.required("BENCH_KEYS_FILE"))) do
    local key, department = line:match("^(%S+) (%S+)$")
    prepared[#prepared + 1] = wrk.format("POST", common.prefix .. "/customers", {
      ["X-Api-Key"] = key,
      ["X-Department-Id"] = department,
      ["Content-Type"] = "application/json",
    }, body)
  end
  -- Threads start at different departments, so that every one is loaded from the first request.
  next_one = ((thread_index or 0) % #prepared) + 1
end

function request()
  local chosen = prepared[next_one]
  next_one = next_one % #prepared + 1
  return chosen
end
