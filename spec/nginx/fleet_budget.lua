-- Every budget kind shared by the 4 workers of a real nginx (Debian's
-- nginx + libnginx-mod-http-lua): a handler retries an upstream on
-- 127.0.0.1 through backoff.retry with one kind at a time, while the
-- upstream switches between healthy, half failing (every other request
-- a 503) and dead.  Checked: the decisions follow each kind's rule (one
-- call at a time, where they are exact), the shared counters stay within
-- the bounds of doc/budget.md under concurrent calls, nothing is NaN or
-- fractional in the dict, and the error log stays clean; and a second
-- outage 3 s after a recovery (the recommended budget lends no storm).
-- Bounded: about 1,500 calls of at most 4 attempts, then 22 s of calls
-- 20 at a time; nginx runs under `timeout`, on free ports, and is
-- stopped by its pid.  TAP.
--   lua5.4 spec/nginx/fleet_budget.lua ROOT
local ROOT = assert(arg[1], "usage: fleet_budget.lua ROOT")
local H = dofile(ROOT .. "/spec/nginx/harness.lua")
local PREFIX = ROOT .. "/build/nginx-fleet-budget"

local tap = H.tap(os.getenv("VERBOSE"))
local check = tap.check

local function fields(body) return H.fields(body, "\n ") end

local port
local function get(path) return H.get(port, path, 15) end

-- n calls of kind, `conc` at a time; returns the answers' fields
local function calls(kind, n, conc)
  local out, done = {}, 0
  while done < n do
    local batch = {}
    for i = 1, math.min(conc, n - done) do
      batch[i] = H.start_get(port, "/call?kind=" .. kind, 15)
    end
    for _, finish in ipairs(batch) do
      out[#out + 1] = fields((finish()))
      done = done + 1
    end
  end
  return out
end

local function state(kind)
  local s = fields(get("/state?kind=" .. kind))
  for k, v in pairs(s) do s[k] = tonumber(v) or v end
  return s
end

local function mode(m) return get("/mode?m=" .. m) end

local function sum(answers, field)
  local t = 0
  for _, a in ipairs(answers) do t = t + (tonumber(a[field]) or 0) end
  return t
end

local function count(answers, field, value)
  local n = 0
  for _, a in ipairs(answers) do
    if a[field] == value then n = n + 1 end
  end
  return n
end

-- per kind: the full state, the retries one call at a time grants
-- against a dead upstream (exact), and the bounds of the raw counter
-- at rest after concurrent calls ([lo, hi]; nil: no single counter)
local KINDS = {
  { kind = "token", full = 20, dead_retries = 4, raw = { -3 * 20, 20 },
    what = "token bucket (20 tokens, cost 5): 4 retries, then none" },
  { kind = "grpc", full = 10, dead_retries = 3, raw = { -3 * 1000, 10000 },
    what = "gRPC A6 (10 tokens, ratio 1): retries while tokens > 5" },
  -- the recommended reserve is 8% of the requests of the last 10 s (at
  -- least 1, at most 8): which worker's counts another sees depends on
  -- the timing, so its decisions are checked against bounds
  -- (its counter's size: the capacity, 8, and the most its credit for
  -- recoveries may lend, 2^20; thousandths)
  { kind = "rec", reserve = true, size = (8 + 2 ^ 20) * 1000,
    raw = { (8 + 2 ^ 20) * 1000 - 8000 - 3 * 6000, (8 + 2 ^ 20) * 1000 },
    what = "recommended: at least 1 retry against a dead upstream, at "
      .. "most 8% of the requests (48 healthy + 10 dead calls: 4)" },
  { kind = "ratio", what = "ratio (10% of requests over 60 s + 6)" },
  { kind = "sre", what = "SRE adaptive (k 2 over 60 s)" },
}

local function kind_checks(K)
  local kind = K.kind
  get("/reset")
  -- healthy: nothing fails, nothing is refused, the budget stays full
  mode("healthy")
  local a = calls(kind, 48, 16)
  local s = state(kind)
  -- a full budget: its whole capacity, or (rec) its whole reserve
  local function full(st)
    if K.reserve then return st.tokens == st.reserve end
    return not K.full or st.tokens == K.full
  end
  check(count(a, "ok", "1") == 48 and s.attempts == 48 and s.refused == 0
    and full(s), kind .. ", healthy: 48 calls, 48 attempts, full budget",
    ("ok %d, attempts %s, tokens %s, reserve %s"):format(count(a, "ok", "1"),
      s.attempts, s.tokens, tostring(s.reserve)))

  -- dead, one call at a time: the rule's exact decisions
  mode("dead")
  local retries = 0
  for _ = 1, 10 do
    local r = calls(kind, 1, 1)[1]
    retries = retries + (tonumber(r.attempts) or 0) - 1
  end
  s = state(kind)
  if K.dead_retries then
    check(retries == K.dead_retries, kind .. ", dead, one at a time: "
      .. K.what, ("%d retries, tokens %s"):format(retries, s.tokens))
  elseif K.reserve then
    check(retries >= 1 and retries <= math.floor(0.08 * 58),
      kind .. ", dead, one at a time: " .. K.what,
      ("%d retries, tokens %s, reserve %s"):format(retries, s.tokens,
        s.reserve))
  elseif kind == "ratio" then
    -- reserve 0.1/s x 60 s = 6 retries, and 10% of the 58 requests
    check(retries >= 6 and retries <= 6 + 5.8, kind .. ", dead, one at "
      .. "a time: " .. K.what, ("%d retries"):format(retries))
  else
    -- no refusal until requests > 2 x accepts (96): the first calls
    -- retry, 10 calls x 4 attempts stay below it
    check(retries == 30 and s.requests == s.attempts
      and s.accepts == 48, kind .. ", dead, one at a time: no refusal "
      .. "while requests <= 2 x accepts; counts exact",
      ("%d retries, requests %s, attempts %s, accepts %s"):format(retries,
        s.requests, s.attempts, s.accepts))
  end

  -- dead, 60 concurrent calls over the 4 workers
  a = calls(kind, 60, 20)
  s = state(kind)
  local extra = sum(a, "attempts") - 60
  local workers = 0
  for w = 0, 3 do if (s["w" .. w] or 0) > 0 then workers = workers + 1 end end
  if K.dead_retries then
    check(extra == 0 and s.refused >= 60, kind .. ", dead, 60 concurrent "
      .. "calls: the empty budget grants no retry",
      ("%d retries, %d refused, %d workers"):format(extra, s.refused,
        workers))
  elseif K.reserve then
    -- 118 requests in all: the reserve grows to its cap, 8, and nothing
    -- is earned
    check(retries + extra <= 8 and s.refused >= 60, kind .. ", dead, 60 "
      .. "concurrent calls: no more retries than the reserve's cap, 8, "
      .. "since the upstream died", ("%d + %d retries, %d refused, %d "
      .. "workers"):format(retries, extra, s.refused, workers))
  elseif kind == "ratio" then
    check(retries + extra <= 6 + 0.1 * (48 + 10 + 60) + 1e-9,
      kind .. ", dead, 60 concurrent calls: retries within the reserve "
      .. "plus 10% of the requests", ("%d + %d retries"):format(retries,
      extra))
  else
    local p = (s.requests - 2 * s.accepts) / (s.requests + 1)
    check(s.requests == s.attempts + (s.refused or 0) and s.accepts == 48
      and s.refused > 0 and p > 0.5, kind .. ", dead, 60 concurrent calls:"
      .. " refusals once requests > 2 x accepts; counts exact",
      ("requests %s attempts %s refused %s accepts %s p %.2f"):format(
        s.requests, s.attempts, s.refused, s.accepts, p))
  end
  check(workers >= 2, kind .. ": the calls were spread over the workers",
    ("%d workers"):format(workers))

  -- healthy again: everything succeeds; the budget refills
  mode("healthy")
  a = calls(kind, 40, 20)
  s = state(kind)
  check(count(a, "ok", "1") == 40 and full(s),
    kind .. ", healthy again: every call succeeds, the budget refills",
    ("ok %d, tokens %s, reserve %s"):format(count(a, "ok", "1"), s.tokens,
      tostring(s.reserve)))

  -- half failing, concurrent: retries succeed half the time
  mode("half")
  a = calls(kind, 80, 20)
  s = state(kind)
  local ok = count(a, "ok", "1")
  if kind == "rec" then
    check(ok >= 68 and count(a, "reason", "budget") <= 4,
      kind .. ", half failing: retries made freely, most calls succeed",
      ("%d/80 ok, %d refused"):format(ok, count(a, "reason", "budget")))
  else
    check(ok >= 40, kind .. ", half failing: at least the first attempts"
      .. " that work succeed", ("%d/80 ok"):format(ok))
  end

  -- at rest: the raw counter within its documented bounds, every
  -- value in the dict an exact integer
  if K.raw then
    local raw = tonumber(s.raw) or K.size
      or (K.full or 8) * (kind == "token" and 1 or 1000)
    check(raw >= K.raw[1] and raw <= K.raw[2], kind .. ": the shared "
      .. "counter at rest is within its bounds",
      ("raw %s in [%d, %d]"):format(tostring(s.raw), K.raw[1], K.raw[2]))
  end
  check(s.bad == 0, kind .. ": every value in the dict is an exact number",
    ("bad %s"):format(tostring(s.bad)))
end

-- A second outage 3 s after a recovery (issue 31): the credit the
-- recommended budget lends after a recovery must not pay for a storm at
-- the next failure (before: 12,363 retries in 8 s against 8 in the
-- first outage).  Healthy 4 s, dead 10 s, healthy 3 s, dead 5 s, calls
-- 20 at a time the whole while; the retries of each dead spell.
local function repeated_outage()
  local socket = require "socket"
  get("/reset")
  local function phase(m, seconds)
    mode(m)
    local before = state("rep")
    local stop = socket.gettime() + seconds
    while socket.gettime() < stop do calls("rep", 20, 20) end
    local after = state("rep")
    local n = after.calls - before.calls
    return after.attempts - before.attempts - n, n
  end
  phase("healthy", 4)
  local r1, n1 = phase("dead", 10)
  phase("healthy", 3)
  local r2, n2 = phase("dead", 5)
  check(n1 > 0 and n2 > 0 and r1 >= 1 and r2 <= math.max(r1, 8),
    "rec: a second outage 3 s after a recovery lets through no more "
    .. "retries than the first", ("first: %d retries for %d calls; "
    .. "second: %d for %d"):format(r1, n1, r2, n2))
end

local function main()
  port = H.free_port()
  local up = H.free_port()
  local ok, err = H.start_nginx(PREFIX,
    ROOT .. "/spec/nginx/fleet_budget.conf.in",
    { ROOT = ROOT, PORT = port, UP = up }, 150,
    function() return get("/ping") and true end)
  if not check(ok, "nginx with 4 workers and every budget kind shared "
               .. "starts on 127.0.0.1", err) then
    return
  end
  for _, K in ipairs(KINDS) do
    local fine, e = pcall(kind_checks, K)
    check(fine, K.kind .. ": checks ran without a Lua error", e)
  end
  local fine, e = pcall(repeated_outage)
  check(fine, "the repeated outage ran without a Lua error", e)
  H.stop_nginx(PREFIX)
  local bad = H.errors_logged(PREFIX)
  check(#bad == 0, "nginx logged no error", table.concat(bad, "\n"))
end

main()
tap.plan()
