-- Hostile input: every option and argument against wrong types,
-- numeric strings, NaN, +-inf, -0, negatives, huge values and
-- non-integers; wrong selves; long runs.  Nothing may crash, every
-- refusal names the option, and nothing returned is NaN, inf or < 0.
local backoff = require "backoff"
local helpers = require "spec.helpers"

local HOSTILE = { "10", "", "abc", true, false, {}, print, io.stdout,
  0 / 0, -(0 / 0), math.huge, -math.huge, -0.0, -1, -1e-300, 1e308,
  2 ^ 63, -(2 ^ 63), 2 ^ 64, 2.5, 0.1, 1e-320 }

local BASE = {}
for s, req in pairs(helpers.REQUIRED) do BASE[s] = req end
for s, req in pairs(helpers.SYSTEMS) do BASE[s] = req end

local OPTIONS = { "delay", "delay_on_success", "initial_delay",
  "initial_delay1", "initial_delay2", "delay_increment", "exponent_base",
  "delay_increment_on_failure", "delay_increment_on_success",
  "delay_multiple_on_failure", "delay_multiple_on_success", "multiplier",
  "min_delay", "max_delay", "max_attempts", "max_actual_duration",
  "consider_actual_delay", "jitter", "jitter_factor", "seed", "start",
  "clock", "adjust_timeout_factor", "min_adjust_timeout",
  "timeout_jitter_factor", "strategy",
  -- and the systems'
  "initial_interval", "randomization_factor", "max_interval",
  "max_elapsed_time", "backoff_type", "max_tries", "base", "range",
  "jitter_threshold", "use_jitter", "max_retry_attempts",
  "median_first_retry_delay", "cap", "max_retries", "fast_first",
  "cap_then_jitter", "random", "max_hint" }

local function exercise(b)
  for i = 1, 40 do
    local ts = (i % 5 == 0) and 1e300 * i or i
    local d, t = b:failure(ts)
    if d ~= nil then
      assert(helpers.is_delay(d), tostring(d))
      if t ~= nil then assert(helpers.is_delay(t), tostring(t)) end
    else
      assert(t == "max_attempts" or t == "max_actual_duration", t)
      b:success(ts)
    end
    if i % 4 == 0 then assert(helpers.is_delay((b:success(ts)))) end
  end
  assert(helpers.is_delay(b:delay()))
  local t = b:timeout()
  assert(t == nil or helpers.is_delay(t))
end

describe("hostile input", function()
  for s, base in pairs(BASE) do
    it(s .. ": each option x each hostile value raises by name or works",
      function()
        local tried = 0
        for _, k in ipairs(OPTIONS) do
          for _, v in ipairs(HOSTILE) do
            local o = {}
            for a, x in pairs(base) do o[a] = x end
            o[k] = v
            if k == "adjust_timeout_factor" or k == "min_adjust_timeout"
               or k == "timeout_jitter_factor" then
              o.adjust_timeout_factor = o.adjust_timeout_factor or 0.5
              o.max_actual_duration = 100
            end
            local ok, b = pcall(backoff.new, s, o)
            tried = tried + 1
            if ok then
              -- a function option (random) may fail only when called:
              -- then by name, as a constructor would
              local used, err = pcall(exercise, b)
              assert(used or k == "random" and type(err) == "string"
                and err:find("option 'random' must return", 1, true), err)
            else
              assert(type(b) == "string" and b:find("backoff." .. s, 1, true)
                and (b:find("'" .. k .. "'", 1, true)
                  or b:find("option", 1, true)), b)
            end
          end
        end
        assert.is_true(tried >= #OPTIONS * #HOSTILE)
      end)
  end

  it("every method refuses every wrong self without crashing", function()
    local b = backoff.constant { delay = 1 }
    local mt = getmetatable(b)
    for _, f in pairs(mt.__index) do
      for _, bad in ipairs { {}, io.stdout, 1, "s", true, print } do
        local ok = pcall(f, bad)
        assert.is_false(ok)
      end
    end
    for _, k in ipairs { "__gc", "__close", "__tostring" } do
      assert.is_false(pcall(mt[k], io.stdout))
      assert.is_false(pcall(mt[k]))
    end
  end)

  it("every method refuses every hostile argument and stays unchanged",
    function()
      local a = backoff.exponential { initial_delay = 1, seed = 4,
        jitter = "full", start = 0 }
      local b = backoff.exponential { initial_delay = 1, seed = 4,
        jitter = "full", start = 0 }
      for i, v in ipairs(HOSTILE) do
        for _, m in ipairs { "failure", "success", "reset", "elapsed" } do
          local ok = pcall(b[m], b, v)
          if ok and type(v) == "number" then
            b = backoff.exponential { initial_delay = 1, seed = 4,
              jitter = "full", start = 0 }   -- a finite ts is legal
            a = backoff.exponential { initial_delay = 1, seed = 4,
              jitter = "full", start = 0 }
          end
        end
        assert.same({ a:failure(i) }, { b:failure(i) })
      end
    end)

  it("survives 10^7 failures without a success", function()
    local b = backoff.exponential { initial_delay = 1, jitter = "equal",
      max_delay = 1e300 }
    local d
    for _ = 1, 1e7 do d = b:failure(0) end
    assert.is_true(helpers.is_delay(d))
    assert.equal(1e7 + 1, b:attempts() + 1)
  end)

  it("survives 10^6 alternating operations with wild timestamps", function()
    local b = backoff.mimd { initial_delay = 1, delay_multiple_on_failure = 3,
      delay_multiple_on_success = 0.5, consider_actual_delay = true,
      jitter_factor = 1, adjust_timeout_factor = 0.5,
      max_actual_duration = 1e308, start = -1e308 }
    local ts = 0
    for i = 1, 1e6 do
      ts = (i % 3 == 0) and ts - 1e300 or ts + 1e300
      local d, t
      if i % 2 == 0 then d, t = b:success(ts) else d, t = b:failure(ts) end
      if d then
        assert(helpers.is_delay(d) and helpers.is_delay(t))
      end
    end
  end)
end)
