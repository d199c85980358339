-- Huge counts, huge numbers, hostile timestamps: every result stays a
-- finite number >= 0.
local backoff = require "backoff"
local helpers = require "spec.helpers"

local GROWING = {
  { "exponential", { initial_delay = 1 } },
  { "exponential", { initial_delay = 1e300, exponent_base = 1e300 } },
  { "linear", { initial_delay = 1e308, delay_increment = 1e308 } },
  { "fibonacci", { initial_delay1 = 1e308, initial_delay2 = 1e308 } },
  { "lild", { initial_delay = 1e308, delay_increment_on_failure = 1e308,
              delay_increment_on_success = 1e308 } },
  { "mimd", { initial_delay = 1e308, delay_multiple_on_failure = 1e308,
              delay_multiple_on_success = 1e308 } },
  { "decorrelated", { initial_delay = 1e308, max_delay = 1.7e308,
                      multiplier = 1e308 } },
  { "retry_timeouts", { initial_delay = 1e308, max_actual_duration = 1e308,
                        max_attempts = 0 } },
}

describe("limits", function()
  for _, case in ipairs(GROWING) do
    it(case[1] .. " saturates instead of overflowing", function()
      for _, jitter in ipairs { "none", "full", "equal", "proportional" } do
        local o = {}
        for k, v in pairs(case[2]) do o[k] = v end
        o.consider_actual_delay = true
        if case[1] ~= "decorrelated" then
          o.jitter = jitter
          if jitter == "proportional" then o.jitter_factor = 1 end
        end
        local b = backoff.new(case[1], o)
        for i = 1, 3000 do
          local d, t = b:failure(i % 7 == 0 and -1e308 or 1e300 * (i % 3))
          if d == nil then   -- past 1e308 seconds: a duration give-up
            assert.equal("max_actual_duration", t)
          else
            assert.is_true(helpers.is_delay(d), tostring(d))
            if t then assert.is_true(helpers.is_delay(t)) end
          end
          if i % 100 == 0 then
            d = b:success(1e308)
            assert.is_true(helpers.is_delay(d), tostring(d))
          end
        end
        assert.is_true(helpers.is_delay(b:delay()))
        assert.is_true(helpers.is_delay(b:elapsed(1.7e308)))
      end
    end)
  end

  it("accepts epoch-sized timestamps exactly", function()
    local b = backoff.constant { delay = 2, consider_actual_delay = true,
      start = 1.7e9 }
    assert.equal(2, b:failure(1.7e9 + 0.25))
    assert.equal(3.75, b:failure(1.7e9 + 0.5))
  end)

  it("saturates a huge max_attempts and counts past 2^53", function()
    local b = backoff.constant { delay = 1, max_attempts = 1e300 }
    assert.equal(1, b:failure(0))
    assert.is_true(b:config().max_attempts > 2 ^ 60)
  end)

  it("returns +0, never -0", function()
    local b = backoff.constant { delay = -0.0 }
    local d = b:failure(0)
    assert.equal(0, d)
    assert.is_true(1 / d > 0)
  end)
end)
