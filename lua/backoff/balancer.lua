-- backoff.balancer: a backoff policy for proxy_pass retries, called from
-- balancer_by_lua* on every try of a request; balancer.done from
-- log_by_lua* when the request ends.  doc/balancer.md is the reference.
--
--   upstream backend {
--     server 10.0.0.1:8080;   # the servers (or one placeholder,
--     server 10.0.0.2:8080;   # 0.0.0.1): the Lua code picks the peer
--     balancer_by_lua_block {
--       local app = require "myapp"     -- policy, budget, peers
--       local ok, attempt = require("backoff.balancer")(app.policy,
--                             { budget = app.budget })
--       if not ok then return end     -- refused: nginx answers 502
--       local peer = app.peers[(attempt - 1) % #app.peers + 1]
--       assert(require("ngx.balancer").set_current_peer(peer[1], peer[2]))
--     }
--   }
--
-- The door of a policy that cannot wait: nginx has already started a
-- try when it runs for it.  lua/backoff/engine.lua decides, with these
-- rules of its own:
--   * the policy must have max_attempts: tries cannot be spaced out by
--     the policy's delays, so a duration alone does not bound them;
--   * with max_actual_duration, the policy must have per-try timeouts
--     (adjust_timeout_factor, or retry_timeouts): each try's timeouts
--     are the policy's, cut to the time left, so no try's timeout ends
--     after the deadline;
--   * the next try is granted (set_more_tries(1), at most once per try)
--     only when it may be made (engine.reserve: fewer than max_attempts
--     tries so far, at least min_attempt_time left after this try's
--     timeout, the breaker closed, the budget allowing it); never again
--     once nginx reported its cap (proxy_next_upstream_tries);
--   * every try after the first is paid when it starts (withdraw), and
--     made only if it is paid and the breaker allows it: the budget's
--     bound holds however many requests are in flight (a grant paid
--     later let each of them retry once past it).  It is paid then, not
--     at the grant: a grant held by each request in flight would empty
--     a small budget on a good day;
--   * a try nginx starts without a grant (each `server` line of the
--     upstream block gives nginx one try of its own; a failed cached
--     keepalive connection one more) is decided then, as a retry would
--     be: the policy, the deadline, the breaker, the budget;
--   * a try refused ends the request with ngx.exit(NGX_BUSY): nginx
--     answers 502 (logging "no live upstreams").  An HTTP status given
--     to ngx.exit in the balancer phase becomes 500 in stock
--     lua-nginx-module (any code > 0 is NGX_ERROR there, unless nginx
--     has OpenResty's balancer status patch), and NGX_DECLINED loops
--     nginx on the same try when proxy_next_upstream has `error`: so
--     the caller just returns;
--   * the budget and the breaker are told the outcome of every try;
--   * balancer.done counts 499 (client closed) and 408 (client timed
--     out) as neither success nor failure: nothing recorded.

local engine = require "backoff.engine"
local setup = require "backoff.setup"
local check = require "backoff.check"
local util = require "backoff.util"
local phase = require "backoff.phase"

local error, max, min, rawget, setmetatable, tostring, type =
      error, math.max, math.min, rawget, setmetatable, tostring, type

local WHO = "backoff.balancer"
-- nginx counts in milliseconds: no try starts with less than 1 ms left
-- (min_attempt_time's floor), none has a timeout under 1 ms
local DOOR = { who = WHO, waits = false, left_timeout = true,
               min_attempt = 0.001, min_timeout = 0.001 }
local DEFAULT_KEY = "backoff:balancer"
local nb          -- ngx.balancer, loaded on first use

local check_opts = check.validator(WHO, {
  budget = setup.RULES.budget, breaker = setup.RULES.breaker,
  metrics = setup.RULES.metrics,
  min_attempt_time = setup.RULES.min_attempt_time,
  timeouts = setup.timeouts_rule(),
  key = check.string{},
})
check.RENAMED[WHO] = { ctx_key = "key" }

-- the policy's limits, checked once per template
local checked = setmetatable({}, { __mode = "k" })

local function policy_facts(policy)
  if not util.is_backoff(policy) then
    setup.bad_policy(WHO, policy)
  end
  local f = setup.facts(policy)
  if checked[policy] then return f end
  if f.max_attempts <= 0 then
    check.raise(WHO .. ": the policy needs max_attempts (the balancer "
      .. "cannot wait between tries, so a duration alone does not bound "
      .. "them)")
  end
  if f.duration and not f.timeouts then
    check.raise(WHO .. ": a policy with max_actual_duration needs "
      .. "per-try timeouts (adjust_timeout_factor, or retry_timeouts), or "
      .. "a try could run past the deadline")
  end
  checked[policy] = true
  return f
end

-- this try's timeouts: seconds per side (util.sides), at least 1 ms
-- (nginx counts in milliseconds) and at most the longest it takes
local MAX_TIMEOUT = util.MAX_TIMEOUT_MS / 1000
local function bound(s)
  if s == nil then return nil end
  return max(min(s, MAX_TIMEOUT), 0.001)
end

local function set_timeouts(timeout, factors)
  if not timeout then return end
  local c, s, r = util.sides(timeout, factors)
  local ok, err = nb.set_timeouts(bound(c), bound(s), bound(r))
  if not ok then error("backoff.balancer: set_timeouts: " .. tostring(err)) end
end

-- Grant one more try after this one when the run says it may be made
-- (run:reserve; else the run notes why not) and nginx agrees
local function grant(run)
  if not run:reserve() then return end
  local done, warn = nb.set_more_tries(1)
  if not done then
    error("backoff.balancer: set_more_tries: " .. tostring(warn))
  end
  if warn then run:capped() end     -- "reduced tries due to limit"
end

-- ngx_int_t NGX_BUSY: from the balancer phase, nginx's "no live
-- upstreams" path, which answers 502 (ngx_http_upstream_next with
-- NGX_HTTP_UPSTREAM_FT_NOLIVE, a failure proxy_next_upstream never
-- retries)
local NGX_BUSY = -3

-- the try nginx started is not made: nginx answers 502
local function refuse(ngx, reason)
  ngx.exit(NGX_BUSY)
  return nil, reason
end

local none = {}   -- no options

local function balancer(policy, opts)
  local f = policy_facts(policy)
  opts = check_opts(opts) or none
  local ngx = phase.need(WHO, "balancer", "balancer_by_lua*")
  nb = nb or require "ngx.balancer"
  local ctx, key = ngx.ctx, rawget(opts, "key") or DEFAULT_KEY
  local run = ctx[key]
  local delay = 0
  if run == nil then
    local reason
    run, reason = engine.run(DOOR, policy, f, policy:clone(), opts)
    if not run then return nil, reason end
    ctx[key] = run
  else
    -- a later try: the run's word on it (refused: the last try's
    -- failure was told, done does not tell it again)
    local _, reason = run:retry_now()
    if reason then return refuse(ngx, reason) end
    delay = run.b:delay()
  end
  set_timeouts(run.timeout, rawget(opts, "timeouts"))
  grant(run)
  return true, run.attempt, run.timeout, delay
end

local M = {}

-- the request ended without a verdict on the upstream: the client went
local aborts = { [499] = true, [408] = true }

-- A refused try that answered 500 means the caller's ngx.exit(status)
-- replaced nginx's 502: said once per worker.
local warned = false
local function warn_500(ngx)
  if warned then return end
  warned = true
  ngx.log(ngx.WARN, "backoff.balancer: a refused try answered 500, not "
    .. "502: when balancer() returns nil, return without ngx.exit (in the "
    .. "balancer phase lua-nginx-module turns an HTTP status into 500)")
end

--- balancer.done(opts [, ok]) in log_by_lua*: the outcome of the last
-- try, for the budget, the breaker and the metrics.  ok: true/false, or
-- nil to read ngx.status (>= 500 is a failure; 499 and 408 are client
-- aborts: neither success nor failure, nothing recorded, the attempts
-- counted).
function M.done(opts, ok)
  opts = check_opts(opts)
  if ok ~= nil and type(ok) ~= "boolean" then
    check.raise("bad argument #2 to 'done' (boolean or nil expected for "
                .. "'ok', got " .. util.repr(ok) .. ")")
  end
  opts = opts or none
  local ngx = phase.need("backoff.balancer.done", "log", "log_by_lua*")
  local run = ngx.ctx[rawget(opts, "key") or DEFAULT_KEY]
  if run == nil or run.settled then return end
  if run.refused and ngx.status == 500 then warn_500(ngx) end
  local status = ngx.status
  if ok == nil and aborts[status] then
    run:settle(nil)
    local m = rawget(opts, "metrics")
    if m then
      m:add("attempts", run.attempt)
      m:add("retries", run.attempt - 1)
    end
    return
  end
  if ok == nil then ok = status < 500 end
  -- failed with no reason of the run's: nginx did not retry (a failure
  -- not in proxy_next_upstream, a non-idempotent request,
  -- proxy_next_upstream_timeout)
  run:settle(ok, "next_upstream")
end

-- balancer(policy [, opts]) and balancer.done(opts [, ok])
return setmetatable(M, { __call = function(_, policy, opts)
  return balancer(policy, opts)
end })
