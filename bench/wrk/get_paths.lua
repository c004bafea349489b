-- GET each path of BENCH_PATHS_FILE in turn (one a line, under the REST prefix, with its query),
-- so that every request reads another record; each thread starts at another place in the list.
local common = require("common")

local paths = {}
local next_index = 1
local headers

function init(args)
  headers = common.headers(nil)
  for _, path in ipairs(common.lines(common.required("BENCH_PATHS_FILE"))) do
    paths[#paths + 1] = common.prefix .. path
  end
  next_index = (thread_index or 0) * 50021 % #paths + 1
end

function request()
  local path = paths[next_index]
  next_index = next_index % #paths + 1
  return wrk.format("GET", path, headers)
end
