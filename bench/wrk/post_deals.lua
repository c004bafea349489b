-- POST /deals: one new deal with three new customers per request, the same body every time.
local common = require("common")

local body = '{"name": "Analytical engine, 2 units", "volume": 250000, "deal_origin": "trade fair",'
  .. ' "customers": ['
  .. '{"last_name": "Lovelace", "first_name": "Ada", "email": "ada@example.com"},'
  .. ' {"last_name": "Babbage", "first_name": "Charles", "company": "Difference Engines"},'
  .. ' {"last_name": "Somerville", "first_name": "Mary", "city": "Edinburgh"}]}'
local prepared

function init(args)
  prepared = wrk.format("POST", common.prefix .. "/deals", common.headers("application/json"), body)
end

function request()
  return prepared
end
