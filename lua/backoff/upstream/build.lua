-- backoff.upstream.build: a declared upstream's objects, from its plain
-- table (internal: backoff.upstream's; doc/upstream.md lists every
-- option).  Each option is checked here, by backoff.check, with a
-- message naming it; what is not said takes the recommended setting.

local backoff = require "backoff"
local check = require "backoff.check"
local util = require "backoff.util"
local metrics = require "backoff.metrics"

local pairs, pcall, tostring, type = pairs, pcall, tostring, type

local WHO = "backoff.upstream"
local B = {}

local KINDS = { "recommended", "token_bucket", "grpc", "earned", "ratio",
                "adaptive" }
local KIND = {}
for _, k in pairs(KINDS) do KIND[k] = true end

-- a peer's breaker, when the upstream has peers and says "recommended":
-- Envoy's outlier detection (5 consecutive failures), the recommended
-- ratio rule, and a short open interval (0.5 s doubling to 1 s, +-20%):
-- the other peers take the load while it is open, so probing it often
-- costs little and it is back within about a second of its return
B.PEER_BREAKER = { failures = 5, failure_ratio = 0.9, min_calls = 20,
  window = 10, buckets = 10, probes = 1, probe_timeout = 10 }
local function peer_policy()
  return backoff.exponential { initial_delay = 0.5, max_delay = 1,
    jitter = "proportional", jitter_factor = 0.2 }
end

local function is_list_of_strings(v)
  if type(v) ~= "table" or #v == 0 then return false end
  local n = 0
  for _ in pairs(v) do n = n + 1 end
  if n ~= #v then return false end
  for i = 1, #v do if type(v[i]) ~= "string" then return false end end
  return true
end

local function table_or_name(names)
  return function(v)
    return v == false or type(v) == "table" or names[v] == true
  end
end

local RULES = {
  name = check.string{ pattern = "^[%w_.:%-]+$",
    text = "a name of letters, digits and _ . : - (it names the keys "
      .. "and the metrics)" },
  shared = check.shared("upstream"),
  policy = check.custom("\"recommended\", a table of options with a "
    .. "'strategy' (a strategy name or \"recommended\"), or a backoff "
    .. "object", function(v)
      return v == "recommended" or type(v) == "table"
        or util.is_backoff(v) end, "recommended"),
  budget = check.custom("a budget kind's name (" .. table.concat(KINDS,
    ", ") .. "), a table with 'kind' and its options, or false",
    table_or_name(KIND), "recommended"),
  breaker = check.custom("\"recommended\", a table of backoff.breaker.new "
    .. "options, or false", table_or_name({ recommended = true }),
    "recommended"),
  hedge = check.custom("false, true, \"recommended\", or a table { delay "
    .. "= seconds or \"adaptive\", percent = ... }",
    function(v) return type(v) == "boolean" or v == "recommended"
      or type(v) == "table" end, false),
  peers = check.custom("a non-empty list of \"host:port\" strings, or a "
    .. "function returning one", function(v)
      return is_list_of_strings(v) or util.callable(v) end),
  max_ejected = check.number{ min = 0, max = 1, default = 0.5 },
  metrics = check.boolean{ default = true },
  clock = check.fn{},
}

B.options = check.options(WHO, RULES)

-- an error naming the upstream's option, with the inner message
local function fail(what, msg)
  msg = tostring(msg):gsub("^.-:%d+: ", "")
  check.raise(WHO .. ": option '" .. what .. "': " .. msg)
end

-- a copy of t without the keys in drop
local function copy(t, drop)
  local out = {}
  for k, v in pairs(t) do
    if not (drop and drop[k]) then out[k] = v end
  end
  return out
end

--- B.key(o, suffix) -> the key of an object of the upstream: nil
-- without a dict (the objects refuse a key they cannot use)
function B.key(o, suffix)
  if not o.shared then return nil end
  return o.name .. suffix
end

--- B.policy(v, what) -> a backoff object
function B.policy(v, what)
  if util.is_backoff(v) then return v end
  if v == "recommended" then return backoff.recommended() end
  local strategy = v.strategy
  if type(strategy) ~= "string" then
    fail(what, "a table needs 'strategy': a strategy name or "
      .. "\"recommended\" (got " .. check.got(strategy) .. ")")
  end
  local o = copy(v, { strategy = true })
  local ok, b
  if strategy == "recommended" then
    ok, b = pcall(backoff.recommended, o)
  else
    ok, b = pcall(backoff.new, strategy, o)
  end
  if not ok then fail(what, b) end
  return b
end

--- B.budget(o) -> a budget object or nil
function B.budget(o)
  local v = o.budget
  if v == false then return nil end
  local kind, opts = v, {}
  if type(v) == "table" then
    kind = v.kind or "recommended"
    if not KIND[kind] then
      fail("budget", "'kind' must be one of " .. table.concat(KINDS, ", ")
        .. " (got " .. check.got(kind) .. ")")
    end
    opts = copy(v, { kind = true })
  end
  for _, k in pairs { "shared", "key" } do
    if opts[k] ~= nil then
      fail("budget", "'" .. k .. "' is the upstream's (the budget's key "
        .. "is '<name>|budget' in the upstream's dict)")
    end
  end
  opts.shared, opts.key, opts.clock = o.shared, B.key(o, "|budget"),
    opts.clock or o.clock
  local ok, bud = pcall(backoff.budget[kind], opts)
  if not ok then fail("budget", bud) end
  return bud
end

--- B.breaker(o, has_peers, hook) -> make(key, peer): builds one
-- breaker under a key (its on_change is hook(peer)), or nil (breaker =
-- false)
function B.breaker(o, has_peers, hook)
  local v = o.breaker
  if v == false then return nil end
  local opts
  if v == "recommended" then
    if not has_peers then
      return function(key, peer)
        return backoff.breaker.recommended { shared = o.shared,
          key = o.shared and key or nil,
          clock = o.clock, on_change = hook(peer) }
      end
    end
    opts = copy(B.PEER_BREAKER)
    opts.policy = peer_policy()
  else
    for _, k in pairs { "shared", "key", "on_change" } do
      if v[k] ~= nil then
        fail("breaker", "'" .. k .. "' is the upstream's (each peer's "
          .. "breaker is '<name>|breaker|<peer>' in the upstream's dict)")
      end
    end
    opts = copy(v)
    if type(opts.policy) == "table" and not util.is_backoff(opts.policy)
    then
      opts.policy = B.policy(opts.policy, "breaker.policy")
    end
  end
  opts.shared, opts.clock = o.shared, opts.clock or o.clock
  -- built once here, so that a bad option is said at the declaration
  local probe = copy(opts)
  probe.key = B.key(o, "|breaker")
  local ok, err = pcall(backoff.breaker.new, probe)
  if not ok then fail("breaker", err) end
  return function(key, peer)
    local t = copy(opts)
    t.key, t.on_change = o.shared and key or nil, hook(peer)
    return backoff.breaker.new(t)
  end
end

local HEDGE_KEYS = { delay = true, percent = true, max_delay = true,
  percentile = true, min_delay = true }

-- a hedge waits less than the policy's deadline, or it never sends a
-- copy: said at new, not at the first request (and as hedge.request
-- says it, with the milliseconds it was probably meant as)
local function below_deadline(name, d, policy)
  if type(d) ~= "number" then return end
  local most = policy and policy:config().max_actual_duration or 0
  if most > 0 and d >= most then
    error(("'%s' is %g s, not below the policy's deadline "
      .. "(max_actual_duration %g s): no copy would ever be sent; times "
      .. "are seconds (%g for %g ms)"):format(name, d, most, d / 1000, d),
      0)
  end
end

--- B.hedge(o, budget, policy) -> { delay = number or estimator, pace,
-- budget } or nil
function B.hedge(o, budget, policy)
  local v = o.hedge
  if v == false then return nil end
  if v == true or v == "recommended" then v = {} end
  for k in pairs(v) do
    if not HEDGE_KEYS[k] then
      fail("hedge", "unknown key '" .. tostring(k) .. "' (it takes delay, "
        .. "percent, min_delay, max_delay, percentile)")
    end
  end
  local hedge = require "backoff.hedge"
  local delay = v.delay == nil and "adaptive" or v.delay
  local ok, h = pcall(function()
    local d = delay
    below_deadline("delay", d, policy)
    below_deadline("min_delay", v.min_delay, policy)
    if d == "adaptive" then
      d = hedge.latency { shared = o.shared, key = B.key(o, "|hedge"),
        clock = o.clock, max_delay = v.max_delay, min_delay = v.min_delay,
        percentile = v.percentile }
    elseif type(d) ~= "number" or d < 0 or d ~= d or d > 60 then
      error("'delay' must be a number of seconds from 0 to 60 or "
        .. "\"adaptive\" (got " .. check.got(d) .. ")", 0)
    end
    return { delay = d, budget = budget or false,
      pace = hedge.pace { shared = o.shared, key = B.key(o, "|pace"),
        clock = o.clock, percent = v.percent } }
  end)
  if not ok then fail("hedge", h) end
  return h
end

--- B.metrics(o) -> a recorder or nil
function B.metrics(o)
  if not o.metrics then return nil end
  return metrics.new(o.name, { shared = o.shared or false })
end

return B
