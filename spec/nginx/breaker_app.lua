-- The OpenResty side of spec/nginx/breaker.lua: one breaker shared by
-- the 4 workers through a lua_shared_dict, a handler that calls an
-- upstream through backoff.retry with it, and the upstream itself,
-- whose mode (ok, hang, fail, flap) the test sets.  The breaker's hook
-- logs every transition (from, to, its time, interval, opening, worker)
-- into the stats dict; each call's time inside nginx goes there too.
local backoff = require "backoff"
local metrics = require "backoff.metrics"

local app = {}
local up_port, policy, br, wrapped

-- a monotonic clock in seconds, to the microsecond (ngx.now() steps by
-- milliseconds): for the time a call takes inside nginx
local ffi = require "ffi"
pcall(ffi.cdef, [[
  typedef struct { long tv_sec; long tv_nsec; } backoff_spec_timespec;
  int clock_gettime(int clk, backoff_spec_timespec *ts);
]])
local ts = ffi.new("backoff_spec_timespec")
local function mono()
  ffi.C.clock_gettime(1, ts)             -- CLOCK_MONOTONIC
  return tonumber(ts.tv_sec) + tonumber(ts.tv_nsec) * 1e-9
end

-- the open intervals: 0.5 s doubling to 4 s, +-20%; the test checks
-- them against this
app.INTERVAL = { initial = 0.5, max = 4, jitter = 0.2 }

-- init_by_lua, in the master: every worker inherits the objects; a
-- reload (HUP) runs this again, and builds a new object over the same
-- dict, which must not reset the state
function app.init(up)
  up_port = up
  policy = backoff.constant { delay = 0.01, max_attempts = 2 }
  local stats = ngx.shared.stats
  br = backoff.breaker.new {
    shared = ngx.shared.breakers, key = "up", probes = 2,
    probe_timeout = 1, failures = 5, failure_ratio = 0.8, min_calls = 20,
    window = 2, buckets = 4,
    -- a probe that took the 200 ms timeout is hung: it lengthens the
    -- next interval; one that failed fast (503) does not
    hung_after = 0.15,
    policy = backoff.exponential { initial_delay = app.INTERVAL.initial,
      max_delay = app.INTERVAL.max, jitter = "proportional",
      jitter_factor = app.INTERVAL.jitter },
    metrics = metrics.new("up", { shared = ngx.shared.metrics }),
    on_change = function(from, to, info)
      local n = stats:incr("tn", 1, 0)
      stats:set("t" .. n, ("%s %s %.6f %.6f %d %d %d"):format(from, to,
        info.at, info.interval or 0, info.opening or 0, ngx.worker.pid(),
        info.hung or 0))
    end,
  }
  -- the breaker as the engine sees it, noting in ngx.ctx whether this
  -- request's attempt is a probe (so the upstream's log can say so)
  wrapped = {
    allows = function() return br:allows() end,
    allow = function()
      local ok, ticket = br:allow()
      ngx.ctx.probe = type(ticket) == "table"   -- a probe's ticket
      return ok, ticket
    end,
    record = function(_, ok, ticket, s) return br:record(ok, ticket, s) end,
    release = function(_, ticket) return br:release(ticket) end,
  }
end

function app.upstream()
  local m = ngx.shared.mode:get("m") or "ok"
  if m == "flap" then                  -- 0.4 s failing, 0.4 s fine
    m = math.floor(ngx.now() / 0.4) % 2 == 0 and "fail" or "ok"
  end
  if m == "hang" then ngx.sleep(1) end
  if m == "fail" then return ngx.exit(503) end
  ngx.say("ok")
end

function app.set_mode()
  ngx.shared.mode:set("m", ngx.var.arg_m)
  ngx.update_time()
  ngx.say(("mode=%s at=%.3f"):format(ngx.var.arg_m, ngx.now()))
end

-- one attempt: GET on the upstream, 200 ms timeouts
local function fetch(id, attempt)
  local sock = ngx.socket.tcp()
  sock:settimeouts(200, 200, 200)
  local ok, err = sock:connect("127.0.0.1", up_port)
  if not ok then return nil, err end
  sock:send(("GET /?id=%s.%d&probe=%d HTTP/1.0\r\nHost: up\r\n\r\n")
    :format(id, attempt, ngx.ctx.probe and 1 or 0))
  local line
  line, err = sock:receive("*l")
  sock:close()
  if line and line:find(" 200 ", 1, true) then return true end
  return nil, line or err
end

function app.call()
  ngx.update_time()
  local t0 = mono()
  local id = ngx.var.arg_id
  local attempts = 0
  local res, _, reason = backoff.retry(policy, function(attempt)
    attempts = attempts + 1
    return fetch(id, attempt)
  end, { breaker = wrapped })
  local ms = (mono() - t0) * 1000
  if reason == "circuit_open" and attempts == 0 then
    local s = ngx.shared.stats
    s:set("ms" .. s:incr("msn", 1, 0), ms)
  end
  ngx.say("ok=", res and 1 or 0, " reason=", tostring(reason),
          " attempts=", attempts, " worker=", ngx.worker.pid())
end

function app.state()
  local name, info = br:state()
  ngx.say(("state=%s opening=%d since=%.6f interval=%.6f pid=%d forced=%s")
    :format(name, info.opening, info.since or 0, info.interval or 0,
            ngx.worker.pid(), tostring(info.forced)))
end

-- br:force(to) by hand, in whichever worker answers (to: open, closed,
-- or none: automatic)
function app.force()
  local to = ngx.var.arg_to
  br:force(to ~= "none" and to or nil)
  ngx.say("forced=", tostring(to), " worker=", ngx.worker.pid())
end

-- the transitions, one a line; then the times of calls refused while
-- open (ms), one a line, prefixed "ms "
function app.log()
  local s = ngx.shared.stats
  for i = 1, s:get("tn") or 0 do ngx.say(s:get("t" .. i)) end
  for i = 1, s:get("msn") or 0 do ngx.say("ms ", s:get("ms" .. i)) end
end

return app
