-- What any retry budget could at best get out of a flapping upstream
-- (5 s down, 5 s up), with the policy of bench/outage.lua (exponential
-- from 0.1 s to 20 s, full jitter, 10 attempts): an oracle, which knows
-- every request's future, against which a budget's figures are judged.
--
-- Requests arrive uniformly over the cycle: half in an up spell (they
-- succeed at once), half in a down spell.  A request of a down spell
-- makes its retries at the times its own backoff object draws (the
-- library's, seeded per request); it succeeds at the first one that
-- falls in an up spell.  Success counts requests, amplification
-- attempts per request (the first attempt included), as make outage
-- counts them.
--
-- 1. A budget decides, before each retry, to pay for it or to refuse;
--    refused, the request ends (backoff.retry gives up with "budget").
--    So a budget chooses, per request, how many of its retries are
--    made, no more.  The oracle chooses with hindsight: only the
--    requests that need the fewest retries, each given exactly what it
--    needs, no retry wasted on a request that then fails.  No budget
--    does better: its figure bounds them all.
-- 2. The same bound for other policies (the first delay, the jitter):
--    what a budget could do if the policy were another one.
-- 3. A run that may skip an attempt instead of ending (the engine's
--    hold, as it holds a run the breaker refuses: the policy's delays
--    are waited, nothing is sent, the budget is asked again): the
--    oracle makes only a request's first attempt that falls in an up
--    spell, within `hold` seconds of its start.
--
--   luajit bench/flap_oracle.lua [N]      (from anywhere; any Lua)
--   local O = dofile("bench/flap_oracle.lua")  -- the bounds, no output
--   O.truncating(opts, n) -> least amplification for 65%, success at 1.5x
--   O.held(hold, n) -> success, amplification
local here = debug.getinfo(1, "S").source:match("^@(.-)[^/]*$") or "./"
if here == "" then here = "./" end
local main = arg and arg[0] and arg[0]:match("flap_oracle%.lua$")
if main then
  local version = jit and "luajit" or _VERSION:match("%d+%.%d+")
  package.path = here .. "../lua/?.lua;" .. package.path
  package.cpath = here .. "../build/" .. version .. "/?.so;"
    .. package.cpath
end
local backoff = require "backoff"

local DOWN, CYCLE = 5, 10
local N = main and tonumber(arg[1]) or 20000
local HUGE = math.huge

local function up(t) return t % CYCLE >= DOWN end

-- request i of a down spell: its arrival and its retries' times, from
-- the library's object (the model's seeds: one per request)
local function schedule(i, make)
  local t0 = (i - 0.5) / N * DOWN       -- arrivals spread evenly
  local b = make(i, t0)
  local times, t = {}, t0
  while true do
    local d = b:failure(t)
    if not d then break end
    t = t + d
    times[#times + 1] = t
  end
  return t0, times
end

-- the retries request i needs (HUGE: none of its retries is up)
local function need(times)
  for k, t in ipairs(times) do
    if up(t) then return k end
  end
  return HUGE
end

-- the truncating oracle: ks sorted; N requests of a down spell and N
-- of an up one.  -> the least amplification for `target` success, and
-- the most success at amplification `amp`
local function bound(ks, target, amp)
  local want = math.floor((target - 0.5) * 2 * N + 0.5)
  local sum, least = 0, HUGE
  for i = 1, #ks do
    if ks[i] == HUGE then break end
    sum = sum + ks[i]
    if i == want then least = 1 + sum / (2 * N) end
  end
  local spend, got = (amp - 1) * 2 * N, 0
  sum = 0
  for i = 1, #ks do
    if ks[i] == HUGE or sum + ks[i] > spend then break end
    sum, got = sum + ks[i], i
  end
  return least, 0.5 + got / (2 * N)
end

local function policy_maker(strategy, o)
  return function(i, t0)
    local opts = { seed = 1000003 + i, start = t0 }
    for k, v in pairs(o) do opts[k] = v end
    return backoff.new(strategy, opts)
  end
end

local function oracle(make)
  local ks = {}
  for i = 1, N do
    local _, times = schedule(i, make)
    ks[i] = need(times)
  end
  table.sort(ks)
  return ks
end

local MODEL = { initial_delay = 0.1, max_delay = 20, jitter = "full",
                max_attempts = 10 }

-- the requests of a down spell that a held run (up to `hold` seconds
-- from its start) brings to an up spell, each with one retry
local function reached(make, hold)
  local reach = 0
  for i = 1, N do
    local t0, times = schedule(i, make)
    for _, t in ipairs(times) do
      if t - t0 > hold then break end
      if up(t) then reach = reach + 1 break end
    end
  end
  return reach
end

local O = {}

--- O.truncating(opts, n) -> the least amplification that keeps 65%,
-- and the most success at 1.5x, for a budget and the exponential
-- policy of opts (default: make outage's), n requests per down spell
function O.truncating(opts, n)
  N = n or N
  local o = {}
  for k, v in pairs(MODEL) do o[k] = v end
  for k, v in pairs(opts or {}) do o[k] = v end
  return bound(oracle(policy_maker("exponential", o)), 0.65, 1.5)
end

--- O.held(hold, n) -> success, amplification: runs held up to `hold`
-- seconds instead of ended, make outage's policy
function O.held(hold, n)
  N = n or N
  local reach = reached(policy_maker("exponential", MODEL), hold)
  return 0.5 + reach / (2 * N), 1 + reach / (2 * N)
end

if not main then return O end

print(("flapping 5 s / 5 s, %d requests per down spell; success of all "
  .. "requests (half arrive up)"):format(N))
print("\n1. a budget (it pays for a retry or ends the request), the "
  .. "policy of make outage:")
local ks = oracle(policy_maker("exponential", MODEL))
for _, target in ipairs { 0.60, 0.65, 0.70 } do
  local least = bound(ks, target, 1.5)
  print(("   success %.0f%% takes amplification >= %.3f"):format(
    100 * target, least))
end
local _, best = bound(ks, 0.65, 1.5)
print(("   at amplification 1.5: success <= %.1f%%"):format(100 * best))

print("\n2. the same bound, other policies (10 attempts, max_delay 20 s):")
print("   policy                              65%: amp >=   at 1.5x: succ <=")
local POLICIES = {
  { "exponential", 0.1, "full" }, { "exponential", 0.1, "equal" },
  { "decorrelated", 0.1 }, { "exponential", 0.5, "full" },
  { "exponential", 1, "full" }, { "exponential", 2, "full" },
  { "exponential", 5, "full" }, { "exponential", 10, "full" },
}
for _, p in ipairs(POLICIES) do
  local o = { initial_delay = p[2], max_delay = 20, max_attempts = 10,
              jitter = p[3] }
  local k2 = oracle(policy_maker(p[1], o))
  local least, most = bound(k2, 0.65, 1.5)
  print(("   %-36s %8s     %6.1f%%"):format(("%s from %g s%s"):format(
    p[1], p[2], p[3] and (", " .. p[3] .. " jitter") or ""),
    least == HUGE and "never" or ("%.3f"):format(least), 100 * most))
end

print("\n3. a run that may skip attempts (held: nothing sent, the "
  .. "policy's delays waited), the policy of make outage:")
local make = policy_maker("exponential", MODEL)
for _, hold in ipairs { 2, 4, 6, 8, 10 } do
  local reach = reached(make, hold)
  -- each such request: one retry, the one that succeeds
  print(("   held up to %2d s: success <= %.1f%% at amplification %.3f")
    :format(hold, 50 + 50 * reach / N, 1 + reach / (2 * N)))
end
return O
