-- Per-attempt timeouts (RetryTimeouts), for every strategy.
local backoff = require "backoff"
local helpers = require "spec.helpers"

describe("timeouts", function()
  it("are off by default: timeout() is nil, one value returned", function()
    local b = backoff.exponential { initial_delay = 1 }
    assert.is_nil(b:timeout())
    assert.same({ 1 }, { b:failure(0) })
  end)

  it("turn on for any strategy given adjust_timeout_factor", function()
    local b = backoff.constant { delay = 1, adjust_timeout_factor = 0.5,
      min_adjust_timeout = 0, max_actual_duration = 20, start = 0 }
    assert.equal(10, b:timeout())
    local d, t = b:failure(4)      -- left 16: d <= 8, t = (16 - 1) / 2
    assert.equal(1, d)
    assert.equal(7.5, t)
    assert.equal(7.5, b:timeout())
  end)

  it("need max_actual_duration > 0", function()
    local b = backoff.retry_timeouts { max_actual_duration = 0 }
    assert.is_nil(b:timeout())
    assert.same(1, select("#", b:failure()))
  end)

  it("cap the delay by the time left and never go below the minimum",
    function()
      local b = backoff.constant { delay = 30, adjust_timeout_factor = 0.5,
        max_actual_duration = 20, start = 0, min_adjust_timeout = 1 }
      local d, t = b:failure(2)    -- left 18: d capped to 9, t = 4.5
      assert.equal(9, d)
      assert.equal(4.5, t)
      d, t = b:failure(19.5)       -- left 0.5: d 0.25, t 0.125 -> 1
      assert.equal(0.25, d)
      assert.equal(1, t)
    end)

  it("keep the last timeout across a give-up", function()
    local b = backoff.retry_timeouts { jitter_factor = 0,
      timeout_jitter_factor = 0, start = 0, max_attempts = 2 }
    local _, t = b:failure(1)
    assert.is_nil((b:failure(2)))
    assert.equal(t, b:timeout())
  end)

  it("draw the initial timeout once (not per call)", function()
    local b = backoff.retry_timeouts { start = 0 }
    local t = b:timeout()
    assert.is_true(t >= 22.5 and t <= 27.5)
    for _ = 1, 10 do assert.equal(t, b:timeout()) end
  end)

  it("never return a negative delay past the deadline", function()
    local b = backoff.retry_timeouts { jitter_factor = 0,
      timeout_jitter_factor = 0, min_adjust_timeout = 0, start = 0,
      max_attempts = 0 }
    local d, t = b:success(60)     -- 10 s after the deadline
    assert.is_true(helpers.is_delay(d))
    assert.is_true(helpers.is_delay(t))
  end)
end)
