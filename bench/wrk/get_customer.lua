-- GET /customers/{id}: each request reads the next of the seeded customers, whose ids are in
-- the file BENCH_IDS_FILE (one a line); each thread starts at another place in the list.
local common = require("common")

local paths = {}
local next_index = 1
local headers

function init(args)
  headers = common.headers(nil)
  for _, id in ipairs(common.lines(common.required("BENCH_IDS_FILE"))) do
    paths[#paths + 1] = common.prefix .. "/customers/" .. id
  end
  next_index = (thread_index or 0) * 7919 % #paths + 1
end

function request()
  local path = paths[next_index]
  next_index = next_index % #paths + 1
  return wrk.format("GET", path, headers)
end
