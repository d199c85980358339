-- backoff.balancer: a backoff policy for proxy_pass retries, called from
-- balancer_by_lua* on every try of a request; balancer.done from
-- log_by_lua* when the request ends.  doc/balancer.md is the reference.
--
--   upstream backend {
--     server 0.0.0.1;   # one placeholder: the Lua code picks the peer
--     balancer_by_lua_block {
--       local app = require "myapp"     -- policy, budget, peers
--       local ok, attempt = require("backoff.balancer")(app.policy,
--                             { budget = app.budget })
--       if not ok then return ngx.exit(502) end
--       local peer = app.peers[(attempt - 1) % #app.peers + 1]
--       assert(require("ngx.balancer").set_current_peer(peer[1], peer[2]))
--     }
--   }
--
-- The rules (the balancer cannot sleep, and nginx has already started a
-- try when it runs for it):
--   * the policy must have max_attempts: tries cannot be spaced out by
--     the policy's delays, so a duration alone does not bound them;
--   * with max_actual_duration, the policy must have per-try timeouts
--     (adjust_timeout_factor, or retry_timeouts): each try's timeouts
--     are the policy's, cut to the time left, so no try's timeout ends
--     after the deadline;
--   * the next try is granted (set_more_tries(1), at most once per try)
--     only when it will certainly be made: fewer than max_attempts tries
--     so far, at least min_attempt_time left after this try's timeout,
--     and the budget allows it; never again once nginx reported its cap
--     (proxy_next_upstream_tries).  A granted try is never refused;
--   * the budget is paid when the retry is made (withdraw at try k+1),
--     and told the outcome of every try (record) when it has `record`.
--     If another request emptied the budget between the grant and the
--     retry, the retry goes ahead unpaid (nginx has started it; refusing
--     would fail a request that may succeed): at most one unpaid retry
--     per request that raced;
--   * balancer.done counts 499 (client closed) and 408 (client timed
--     out) as neither success nor failure: nothing recorded or paid.

local error, getmetatable, max, min, next, rawget, setmetatable,
      tostring, type =
      error, getmetatable, math.max, math.min, next, rawget, setmetatable,
      tostring, type

local core = require "backoff.core"
local repr = core._repr                     -- short, escaped
local backoff_mt = core._metatable
local core_now = core._now
local nb          -- ngx.balancer, loaded on first use
local none = {}   -- no options

-- the limits of each policy object, read once (config() builds a table)
local limits = setmetatable({}, { __mode = "k" })

local function limits_of(policy)
  local l = limits[policy]
  if l then return l end
  local c = policy:config()
  local attempts = c.max_attempts or 0
  if attempts <= 0 then
    error("backoff.balancer: the policy needs max_attempts (the balancer "
          .. "cannot wait between tries, so a duration alone does not "
          .. "bound them)", 3)
  end
  l = { attempts = attempts }
  if c.max_actual_duration and c.max_actual_duration > 0 then
    if policy:timeout() == nil then
      error("backoff.balancer: a policy with max_actual_duration needs "
            .. "per-try timeouts (adjust_timeout_factor, or "
            .. "retry_timeouts), or a try could run past the deadline", 3)
    end
    l.duration, l.min_attempt = c.max_actual_duration, c.min_adjust_timeout
  end
  limits[policy] = l
  return l
end

local known = { budget = true, ctx_key = true, timeouts = true,
                metrics = true, min_attempt_time = true }
local sides = { connect = true, send = true, read = true }

local function bad(msg, v)
  error("backoff.balancer: " .. msg .. " (got " .. repr(v) .. ")", 4)
end

local util = require "backoff.util"
local has_method, budget_cost = util.has_method, util.budget_cost
local budget_problem = util.budget_problem

local function check_opts(opts)
  if opts == nil then return end
  if type(opts) ~= "table" then
    error("backoff.balancer: options must be a table (got " .. type(opts)
          .. ")", 3)
  end
  for k in next, opts do         -- read raw: no metamethod runs
    if not known[k] then
      error("backoff.balancer: unknown option " .. repr(k), 3)
    end
  end
  local b, key, t = rawget(opts, "budget"), rawget(opts, "ctx_key"),
                    rawget(opts, "timeouts")
  local why = b ~= nil and budget_problem(b)
  if why then                 -- level 3: the caller of balancer or done
    error("backoff.balancer: option 'budget' must be a backoff budget (an "
          .. "object with withdraw, and record or deposit methods; got "
          .. why .. ")", 3)
  end
  if key ~= nil and (type(key) ~= "string" or key == "") then
    bad("option 'ctx_key' must be a non-empty string", key)
  end
  if t ~= nil then
    if type(t) ~= "table" then bad("option 'timeouts' must be a table", t) end
    for k, v in next, t do
      if not sides[k] or v ~= false and (type(v) ~= "number"
                                         or not (v > 0 and v < 1 / 0)) then
        bad("option 'timeouts' takes connect, send and read: a factor > 0"
            .. " or false", v)
      end
    end
  end
  local m = rawget(opts, "metrics")
  if m ~= nil and not has_method(m, "run") then
    bad("option 'metrics' must be a backoff.metrics recorder", m)
  end
  local mat = rawget(opts, "min_attempt_time")
  if mat ~= nil and (type(mat) ~= "number" or not (mat >= 0 and mat < 1 / 0))
  then
    bad("option 'min_attempt_time' must be a finite number >= 0", mat)
  end
end

-- the nginx phase, or nil outside nginx
local function phase()
  local ngx = rawget(_G, "ngx")
  if type(ngx) == "table" and type(ngx.get_phase) == "function" then
    return ngx.get_phase(), ngx
  end
end

local function need_phase(who, want, directive)
  local p, ngx = phase()
  if p ~= want then
    error(("%s needs %s (called %s)"):format(who, directive,
      p and "in the " .. tostring(p) .. " phase" or "outside nginx"), 3)
  end
  return ngx
end

-- this try's timeouts: timeout (seconds) times each factor (default 1;
-- false leaves nginx's own); nginx counts in milliseconds, so >= 1 ms,
-- and at most the longest timeout it takes
local MAX_TIMEOUT = util.MAX_TIMEOUT_MS / 1000
local function set_timeouts(timeout, factors)
  if not timeout then return end
  local f = factors or sides
  local function one(side)
    local x = rawget(f, side)
    if x == false then return nil end
    local s = timeout * (x == nil and 1 or x == true and 1 or x)
    return max(min(s, MAX_TIMEOUT), 0.001)
  end
  local ok, err = nb.set_timeouts(one("connect"), one("send"), one("read"))
  if not ok then error("backoff.balancer: set_timeouts: " .. tostring(err)) end
end

-- would bud:withdraw(cost) succeed now?  allows() when the budget has
-- it; else tokens() >= cost; else (a user object) let withdraw decide
local function allows(bud, cost)
  if bud.allows then return bud:allows(cost) and true or false end
  if cost and has_method(bud, "tokens") then return bud:tokens() >= cost end
  return true
end

-- Grant one more try after this one, when it will certainly be made
-- (see the top of this file); else note in st.stop why not.
local function grant(st, bud, left, timeout, min_attempt)
  if st.capped then return end
  if st.attempt >= st.limits.attempts then
    st.stop = "max_attempts"
    return
  end
  if left and left - timeout < min_attempt then
    st.stop = "max_actual_duration"
    return
  end
  if bud and not allows(bud, st.cost) then
    st.stop = "budget"
    return
  end
  local ok, warn = nb.set_more_tries(1)
  if not ok then
    error("backoff.balancer: set_more_tries: " .. tostring(warn))
  end
  if warn then                      -- "reduced tries due to limit"
    st.capped, st.stop = true, "next_upstream_tries"
    return
  end
  st.granted, st.stop = true, nil
end

-- the outcome of try st.attempt, for a budget that learns from them
local function record(bud, ok, st)
  if bud and bud.record then bud:record(ok, st.attempt, st.paid) end
end

-- try k >= 2 of a request: the previous try failed.  Returns delay and
-- timeout, or nil, reason when the try is refused (only a try nginx
-- started without our grant: several servers in the upstream block).
local function retry(st, bud)
  local granted = st.granted
  st.granted = false
  record(bud, false, st)
  local d, t = st.b:failure()
  st.attempt = st.attempt + 1
  st.paid = nil
  if not granted then
    local l, reason = st.limits, nil
    if d == nil then
      reason = t
    elseif l.duration and l.duration - st.b:elapsed() < st.min_attempt then
      reason = "max_actual_duration"
    elseif bud and not bud:withdraw(st.cost) then
      reason = "budget"
    end
    if reason then
      -- this try is not made: the tries made are as before, and the
      -- last one's failure was recorded above (done must not again)
      st.attempt = st.attempt - 1
      st.reason, st.stop, st.recorded = reason, reason, true
      return nil, reason
    end
    st.paid = bud and st.cost
    return d, t
  end
  if d == nil then d, t = 0, nil end  -- nginx ran late: the try goes ahead
  if bud then                         -- paid now; 0: went ahead unpaid
    st.paid = bud:withdraw(st.cost) and st.cost or 0
  end
  return d, t
end

local function balancer(policy, opts)
  if getmetatable(policy) ~= backoff_mt or type(policy) ~= "userdata" then
    error("bad argument #1 to 'balancer' (backoff object expected, got "
          .. type(policy) .. ")", 2)
  end
  local l = limits_of(policy)
  check_opts(opts)
  opts = opts or none
  local ngx = need_phase("backoff.balancer", "balancer", "balancer_by_lua*")
  nb = nb or require "ngx.balancer"
  local ctx, key = ngx.ctx, rawget(opts, "ctx_key") or "backoff_balancer"
  local st, bud = ctx[key], rawget(opts, "budget")
  local timeout, delay
  if st == nil then
    st = { b = policy:clone(), attempt = 1, limits = l, granted = false,
           min_attempt = max(rawget(opts, "min_attempt_time")
                             or l.min_attempt or 0,
                             0.001) }
    if bud then st.cost = budget_cost(bud) end
    ctx[key] = st
    timeout, delay = st.b:timeout(), 0
  else
    if st.reason then return nil, st.reason end
    delay, timeout = retry(st, bud)
    if delay == nil then return nil, timeout end
  end
  local left
  if l.duration then                -- this try ends by the deadline
    left = l.duration - st.b:elapsed(core_now(st.b))
    if timeout == nil or timeout > left then timeout = left end
    if timeout < 0.001 then timeout = 0.001 end
  end
  set_timeouts(timeout, rawget(opts, "timeouts"))
  grant(st, bud, left, timeout, st.min_attempt)
  return true, st.attempt, timeout, delay
end

local M = {}

-- the request ended without a verdict on the upstream: the client went
local aborts = { [499] = true, [408] = true }

--- balancer.done(opts [, ok]) in log_by_lua*: the outcome of the last
-- try, for the budget and the metrics.  ok: true/false, or nil to read
-- ngx.status (>= 500 is a failure; 499 and 408 are client aborts).
function M.done(opts, ok)
  check_opts(opts)
  if ok ~= nil and type(ok) ~= "boolean" then
    error("bad argument #2 to 'done' (boolean or nil expected for 'ok', "
          .. "got " .. repr(ok) .. ")", 2)
  end
  opts = opts or none
  local ngx = need_phase("backoff.balancer.done", "log", "log_by_lua*")
  local st = ngx.ctx[rawget(opts, "ctx_key") or "backoff_balancer"]
  if st == nil or st.done then return end
  st.done = true
  local aborted = false
  if ok == nil then
    local status = ngx.status
    aborted = aborts[status] or false
    ok = status < 500
  end
  local m, bud = rawget(opts, "metrics"), rawget(opts, "budget")
  if aborted then                   -- neither success nor failure
    if m then
      m:add("attempts", st.attempt)
      m:add("retries", st.attempt - 1)
    end
    return
  end
  if bud and not st.recorded then
    if bud.record then
      record(bud, ok, st)
    elseif ok and st.paid ~= 0 then -- the legacy rule: deposit on success
      if st.attempt > 1 then bud:deposit(st.paid) else bud:deposit() end
    end
  end
  if m then
    if ok then
      m:run(true, st.attempt)
    else
      -- st.stop: why no further try was granted; none: nginx did not
      -- retry (a failure not in proxy_next_upstream, a non-idempotent
      -- request, proxy_next_upstream_timeout)
      m:run(false, st.attempt, st.stop or "next_upstream")
    end
  end
end

-- balancer(policy [, opts]) and balancer.done(opts [, ok])
return setmetatable(M, { __call = function(_, policy, opts)
  return balancer(policy, opts)
end })
