-- Shared by every scenario script in this folder (wrk runs with this folder as its working
-- directory, so `require "common"` finds it). bench/run.py sets the environment:
--   BENCH_API_KEY, BENCH_DEPARTMENT_ID   the credentials sent with every request
--   BENCH_PREFIX                         the REST path prefix (/api/v1/integration)
-- A response that is not 2xx is an error, and so is a GraphQL answer (200) whose body has
-- "errors", for scripts that set `common.graphql = true`. done() prints one line,
--   BENCH_RESULT {...}
-- with the counts, latency percentiles (microseconds) and the first bad response, which
-- bench/run.py reads. Run by hand, e.g.:
--   cd bench/wrk && BENCH_API_KEY=... BENCH_DEPARTMENT_ID=... \
--     wrk -t2 -c32 -d10s -s post_customers.lua http://127.0.0.1:8000

local common = {graphql = false}

common.prefix = os.getenv("BENCH_PREFIX") or "/api/v1/integration"

function common.headers(content_type)
  local headers = {
    ["X-Api-Key"] = os.getenv("BENCH_API_KEY") or "",
    ["X-Department-Id"] = os.getenv("BENCH_DEPARTMENT_ID") or "",
  }
  if content_type then
    headers["Content-Type"] = content_type
  end
  return headers
end

function common.required(name)
  local value = os.getenv(name)
  if value == nil or value == "" then
    error(name .. " is not set")
  end
  return value
end

function common.read(path)
  local file = assert(io.open(path, "rb"))
  local text = file:read("*a")
  file:close()
  return text
end

function common.lines(path)
  local lines = {}
  for line in io.lines(path) do
    if line ~= "" then
      lines[#lines + 1] = line
    end
  end
  assert(#lines > 0, path .. " has no lines")
  return lines
end

-- A JSON string literal of `text`.
function common.json_string(text)
  local escaped = text:gsub('[%c"\\]', function(char)
    local named = {['"'] = '\\"', ["\\"] = "\\\\", ["\n"] = "\\n", ["\r"] = "\\r", ["\t"] = "\\t"}
    return named[char] or string.format("\\u%04x", char:byte())
  end)
  return '"' .. escaped .. '"'
end

-- Every thread's state, for done() to add up; `thread_index` numbers each thread from 0.
local threads = {}
bad_responses = 0
first_bad = nil

function setup(thread)
  thread:set("thread_index", #threads)
  threads[#threads + 1] = thread
end

function response(status, headers, body)
  local bad = status < 200 or status > 299
  if not bad and common.graphql then
    bad = body ~= nil and string.find(body, '"errors"', 1, true) ~= nil
  end
  if bad then
    bad_responses = bad_responses + 1
    if first_bad == nil then
      first_bad = tostring(status) .. " " .. string.sub(body or "", 1, 600)
    end
  end
end

function done(summary, latency, requests)
  local bad, sample = 0, ""
  for _, thread in ipairs(threads) do
    bad = bad + (thread:get("bad_responses") or 0)
    local first = thread:get("first_bad")
    if first ~= nil and sample == "" then
      sample = first
    end
  end
  local errors = summary.errors
  io.write(string.format(
    'BENCH_RESULT {"requests":%d,"duration_us":%d,"bytes":%d,"bad_responses":%d,'
      .. '"connect_errors":%d,"read_errors":%d,"write_errors":%d,"timeouts":%d,'
      .. '"status_errors":%d,"latency_us":{"mean":%.1f,"stdev":%.1f,"max":%d,'
      .. '"p50":%d,"p90":%d,"p99":%d,"p999":%d},"first_bad":%s}\n',
    summary.requests, summary.duration, summary.bytes, bad,
    errors.connect, errors.read, errors.write, errors.timeout, errors.status,
    latency.mean, latency.stdev, latency.max,
    latency:percentile(50), latency:percentile(90), latency:percentile(99),
    latency:percentile(99.9), common.json_string(sample)))
end

return common
