-- backoff.balancer: a backoff policy for proxy_pass retries, called from
-- balancer_by_lua* on every try of a request.
--
--   upstream backend {
--     server 0.0.0.1;   # a placeholder: the Lua code picks the peer
--     balancer_by_lua_block {
--       local policy = require("myapp.policy")  -- a backoff object
--       local ok, attempt = require("backoff.balancer")(policy.upstream,
--                             { budget = policy.budget })
--       if not ok then return ngx.exit(502) end
--       local peer = policy.peers[(attempt - 1) % #policy.peers + 1]
--       assert(require("ngx.balancer").set_current_peer(peer[1], peer[2]))
--     }
--   }
--
-- On the first call of a request (no state in ngx.ctx) it starts a
-- per-request clone of the policy; on every later call (a retry that
-- proxy_next_upstream chose) it records a failure in that clone.  Each
-- call sets this try's connect/send/read timeouts from the policy's
-- per-attempt timeout (ngx.balancer.set_timeouts; policies without
-- timeouts leave nginx's own) and grants one more try with
-- set_more_tries(1) only when the next failure would not give up: fewer
-- than max_attempts tries so far, time left before max_actual_duration,
-- and a retry's cost withdrawn from opts.budget.  nginx caps the tries
-- at proxy_next_upstream_tries (0: no cap) and retries only on the
-- conditions of proxy_next_upstream.
--
-- No sleeping: the balancer phase cannot yield.  The delay the policy
-- gives for a retry is not waited; it is returned (4th value) so that
-- the caller may use it, e.g. to skip a peer that failed less than that
-- long ago.  Per-try timeouts still shrink as the deadline nears, as the
-- policy computes them (they assume the delay was waited, so the last
-- try ends a little before the deadline).
--
-- Returns true, attempt (1 for the first try), timeout (seconds, or nil
-- without timeouts), delay -- or nil, reason when the policy gave up
-- (possible only on a later call, when the deadline passed during the
-- previous try: nginx has already started this try; set a peer anyway
-- or end the request, as above).
--
-- With a budget, call balancer.done(opts) from log_by_lua with the same
-- opts: the balancer phase never learns how the last try ended, so this
-- gives back the cost of a try granted but not used, and deposits what
-- a success earns (the runner's rule: the cost of the retry that
-- succeeded, or refund for a first-try success).  Success is
-- ngx.status < 500 unless given: balancer.done(opts, ok).

local error, getmetatable, max, pairs, rawget, setmetatable, tostring, type =
      error, getmetatable, math.max, pairs, rawget, setmetatable, tostring,
      type

local core = require "backoff.core"
local repr = core._repr                     -- short, escaped
local backoff_mt = core._metatable
local nb          -- ngx.balancer, loaded on first use
local none = {}   -- no options

-- the limits of each policy object, read once (config() builds a table)
local limits = setmetatable({}, { __mode = "k" })

local function limits_of(policy)
  local l = limits[policy]
  if not l then
    local c = policy:config()
    l = { attempts = c.max_attempts or 0, duration = c.max_actual_duration }
    if not l.duration or l.duration <= 0 then l.duration = nil end
    limits[policy] = l
  end
  return l
end

local known = { budget = true, ctx_key = true, timeouts = true }
local sides = { connect = true, send = true, read = true }

local function bad(msg, v)
  error("backoff.balancer: " .. msg .. " (got " .. repr(v) .. ")", 4)
end

local function check_opts(opts)
  if opts == nil then return end
  if type(opts) ~= "table" then
    error("backoff.balancer: options must be a table (got " .. type(opts)
          .. ")", 3)
  end
  for k in pairs(opts) do
    if not known[k] then
      error("backoff.balancer: unknown option " .. repr(k), 3)
    end
  end
  local b, key, t = opts.budget, opts.ctx_key, opts.timeouts
  if b ~= nil and (type(b) ~= "table" and type(b) ~= "userdata"
                   or not b.withdraw) then
    bad("option 'budget' must be a backoff budget", b)
  end
  if key ~= nil and type(key) ~= "string" then
    bad("option 'ctx_key' must be a string", key)
  end
  if t ~= nil then
    if type(t) ~= "table" then bad("option 'timeouts' must be a table", t) end
    for k, v in pairs(t) do
      if not sides[k] or v ~= false and (type(v) ~= "number"
                                         or not (v > 0 and v < 1 / 0)) then
        bad("option 'timeouts' takes connect, send and read: a factor > 0"
            .. " or false", v)
      end
    end
  end
end

-- this try's timeouts: timeout (seconds) times each factor (default 1;
-- false leaves nginx's own); nginx counts in milliseconds, so >= 1 ms
local function set_timeouts(timeout, factors)
  if not timeout then return end
  local f = factors or sides
  local function one(side)
    local x = f[side]
    if x == false then return nil end
    return max(timeout * (x == nil and 1 or x == true and 1 or x), 0.001)
  end
  local ok, err = nb.set_timeouts(one("connect"), one("send"), one("read"))
  if not ok then error("backoff.balancer: set_timeouts: " .. tostring(err)) end
end

-- one more try after this one, if the next failure would not give up
local function grant(st, budget)
  local b, l = st.b, st.limits
  if l.attempts > 0 and b:attempts() + 1 >= l.attempts then return end
  if l.duration and b:elapsed() >= l.duration then return end
  if budget and not budget:withdraw() then return end
  local ok, warn = nb.set_more_tries(1)
  if not ok or warn then                -- capped by proxy_next_upstream_tries
    if budget then budget:deposit(budget:cost()) end
    return
  end
  st.granted = st.granted + 1
end

local M = {}

function M.done(opts, ok)
  check_opts(opts)
  opts = opts or none
  local ctx = rawget(_G, "ngx").ctx
  local key = opts.ctx_key or "backoff_balancer"
  local st, bud = ctx[key], opts.budget
  if st == nil or st.done or bud == nil then return end
  st.done = true
  if ok == nil then ok = rawget(_G, "ngx").status < 500 end
  local cost = bud:cost()
  local give = (st.granted - (st.attempt - 1)) * cost   -- grants unused
  if ok then give = give + (st.attempt > 1 and cost or bud:refund()) end
  if give > 0 then bud:deposit(give) end
end

local function balancer(policy, opts)
  if type(policy) ~= "userdata" or getmetatable(policy) ~= backoff_mt then
    error("bad argument #1 to 'balancer' (backoff object expected, got "
          .. type(policy) .. ")", 2)
  end
  check_opts(opts)
  opts = opts or none
  nb = nb or require "ngx.balancer"
  local ctx, key = rawget(_G, "ngx").ctx, opts.ctx_key or "backoff_balancer"
  local st = ctx[key]
  local timeout, delay
  if st == nil then
    st = { b = policy:clone(), attempt = 1, granted = 0,
           limits = limits_of(policy) }
    ctx[key] = st
    timeout, delay = st.b:timeout(), 0
  else
    if st.reason then return nil, st.reason end
    local d, t = st.b:failure()
    if d == nil then
      st.reason = t
      return nil, t
    end
    st.attempt = st.attempt + 1
    timeout, delay = t, d
  end
  set_timeouts(timeout, opts.timeouts)
  grant(st, opts.budget)
  return true, st.attempt, timeout, delay
end

-- balancer(policy [, opts]) and balancer.done(opts [, ok])
return setmetatable(M, { __call = function(_, policy, opts)
  return balancer(policy, opts)
end })
