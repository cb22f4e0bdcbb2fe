-- wrk script for bench/run_registration.py: every request registers a run with a name no
-- other request of the round uses ("<tag>-t<thread>-<n>"), as training jobs do.
-- Arguments: <tag> [<pause in ms>]: with a pause, each connection waits that long before
-- each registration (a paced load) instead of sending the next one at once.
local threads = 0

function setup(thread)
  threads = threads + 1
  thread:set("thread_id", threads)
end

function init(args)
  tag = args[1] or "r"
  pause = tonumber(args[2] or "0")
  counter = 0
  wrk.headers["Content-Type"] = "application/json"  -- beside -H Authorization
end

function request()
  counter = counter + 1
  local body = string.format('{"name": "%s-t%d-%d"}', tag, thread_id, counter)
  return wrk.format("POST", nil, nil, body)
end

function delay()
  return pause
end
