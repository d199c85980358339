-- Random configurations and operation sequences, every value compared
-- with the plain-Lua model of API.md section 3 (spec/model.lua).
local backoff = require "backoff"
local model = require "spec.model"

local random = math.random

local ID = { lild = true, limd = true, mild = true, mimd = true }

local function pick(t) return t[random(#t)] end

local function amount()
  return pick { 0, 1, 2, 0.5, 3, 10, 0.1, 1e-6, 1e6, 7.25, random() * 20 }
end

local function increment()
  return pick { 4, -5, 0, 1.5, -0.25, 100, random() * 10 - 5 }
end

local function multiple()
  return pick { 2, 0.5, 1, 0.2, 1.5, 0, 3, random() * 3 }
end

local STRATEGIES = { "constant", "linear", "exponential", "fibonacci",
  "lild", "limd", "mild", "mimd", "retry_timeouts" }

local function random_options(s)
  local o = {}
  if s == "constant" then o.delay = amount()
  elseif s == "fibonacci" then
    if random(4) == 1 then o.initial_delay = amount()
    else o.initial_delay1, o.initial_delay2 = amount(), amount() end
  elseif s ~= "retry_timeouts" or random(2) == 1 then
    o.initial_delay = amount()
  end
  if s == "linear" and random(2) == 1 then o.delay_increment = increment() end
  if (s == "exponential" or s == "retry_timeouts") and random(2) == 1 then
    o.exponent_base = pick { 2, 3, 1.5, math.sqrt(2), 0.5, 1 }
  end
  local lf = s == "lild" or s == "limd"
  local ls = s == "lild" or s == "mild"
  if ID[s] then
    if lf then o.delay_increment_on_failure = increment()
    else o.delay_multiple_on_failure = multiple() end
    if ls then o.delay_increment_on_success = increment()
    else o.delay_multiple_on_success = multiple() end
  end
  if (s == "constant" or s == "linear" or s == "exponential"
      or s == "fibonacci") and random(3) == 1 then
    o.delay_on_success = amount()
  end
  if random(3) == 1 then o.min_delay = pick { 0, 1, 0.5, 2 } end
  if random(2) == 1 then
    -- a first delay above max_delay is an error (spec/03): a cap at or
    -- above every first delay, or none
    local first = math.max(o.initial_delay or
      (s == "retry_timeouts" and math.sqrt(2) or 0),
      o.initial_delay1 or 0, o.initial_delay2 or 0)
    if s == "constant" then first = 0 end   -- delay may exceed it
    local caps = {}
    for _, m in ipairs { 100, 20, 5, 1e4, 0.5 } do
      if m >= first then caps[#caps + 1] = m end
    end
    if #caps > 0 then o.max_delay = pick(caps) end
  end
  if random(3) == 1 then o.max_attempts = random(0, 12) end
  if random(3) == 1 then o.max_actual_duration = pick { 0, 10, 50, 1000 } end
  if random(2) == 1 then o.consider_actual_delay = random(2) == 1 end
  if s == "retry_timeouts" then
    o.jitter_factor, o.timeout_jitter_factor = 0, 0
  elseif random(4) == 1 then
    o.adjust_timeout_factor = pick { 0.5, 0.25, 0.75, 0, 1 }
  end
  if o.adjust_timeout_factor or s == "retry_timeouts" then
    if random(2) == 1 then o.min_adjust_timeout = pick { 0, 1, 5 } end
    if random(2) == 1 then o.adjust_timeout_factor = pick { 0.5, 0.25, 0.9 } end
  end
  o.start = pick { 0, 1554652553, 1.7e9 + random(), 12.5 }
  return o
end

local function same(a, b)
  if a == nil or b == nil or type(a) == "string" then return a == b end
  if a == b then return true end
  return math.abs(a - b) <= 1e-12 * math.max(math.abs(a), math.abs(b))
end

describe("the module against the model of the pipeline", function()
  math.randomseed(20261122)
  for _, s in ipairs(STRATEGIES) do
    it(s .. ": 300 random configurations x 40 operations agree", function()
      for case = 1, 300 do
        local o = random_options(s)
        local b, m = backoff.new(s, o), model.new(s, o)
        local ts = o.start
        for i = 1, 40 do
          local r = random()
          if r < 0.1 then ts = ts - random() * 3       -- clocks step back
          elseif r < 0.6 then ts = ts + pick { 0, 1, 0.5, 2.25, 7 }
          else ts = ts + random() * 10 end
          local op = random() < 0.7 and "failure" or "success"
          local d1, t1 = b[op](b, ts)
          local d2, t2 = model[op](m, ts)
          if not (same(d1, d2) and same(t1, t2)) then
            error(("%s case %d op %d %s(%.17g): got %s, %s; model %s, %s\n"
              .. "options: %s"):format(s, case, i, op, ts, tostring(d1),
              tostring(t1), tostring(d2), tostring(t2),
              require("spec.helpers").dump(o)))
          end
          assert(same(b:attempts(), m.attempts))
        end
      end
    end)
  end
end)
