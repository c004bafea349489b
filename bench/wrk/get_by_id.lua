-- GET /<collection>/{id}: each request reads the next of the seeded ids in the file
-- BENCH_IDS_FILE (one a line) of BENCH_COLLECTION (customers when unset); each thread starts at
-- another place in the list.
local common = require("common")

local paths = {}
local next_index = 1
local headers

function init(args)
  headers = common.headers(nil)
  local collection = os.getenv("BENCH_COLLECTION") or "customers"
  if collection == "" then
    collection = "customers"
  end
  for _, id in ipairs(common.lines(common.required("BENCH_IDS_FILE"))) do
    paths[#paths + 1] = common.prefix .. "/" .. collection .. "/" .. id
  end
  next_index = (thread_index or 0) * 7919 % #paths + 1
end

function request()
  local path = paths[next_index]
  next_index = next_index % #paths + 1
  return wrk.format("GET", path, headers)
end
