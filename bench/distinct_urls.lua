-- wrk: each request asks for the URL's path with a query string no other request has, so no
-- cache of answers can serve it (bench/warm_throughput.py --distinct-urls). The board
-- ignores the parameter.
local threads = 0

function setup(thread)
  threads = threads + 1
  thread:set("thread_id", threads)
end

local sent = 0

function request()
  sent = sent + 1
  return wrk.format(nil, wrk.path .. "?tbhub_bench=" .. thread_id .. "-" .. sent)
end
