-- Timestamps, clocks, start, reset, clone, elapsed, and the rule that
-- an error leaves the object exactly as it was.
local backoff = require "backoff"

describe("state", function()
  it("treats a timestamp before the last one as equal to it", function()
    local b = backoff.constant { delay = 2, consider_actual_delay = true,
      start = 0 }
    assert.equal(2, b:failure(10))
    assert.equal(4, b:failure(5))      -- as if at 10: no time passed
    assert.equal(2, b:failure(14))
  end)

  it("keeps giving up on duration even if the clock steps back", function()
    local b = backoff.constant { delay = 1, max_actual_duration = 10,
      start = 0 }
    assert.equal(1, b:failure(1))
    assert.same({ nil, "max_actual_duration" }, { b:failure(11) })
    assert.same({ nil, "max_actual_duration" }, { b:failure(2) })
    assert.equal(0, b:success(3))
    assert.same({ nil, "max_actual_duration" }, { b:failure(3) })
    b:reset(100)
    assert.equal(1, b:failure(101))
  end)

  it("gives up at max_attempts after N-1 delays; a success resets",
    function()
      local b = backoff.exponential { initial_delay = 1, max_attempts = 3 }
      assert.equal(1, b:failure(0))
      assert.equal(2, b:failure(0))
      assert.same({ nil, "max_attempts" }, { b:failure(0) })
      assert.same({ nil, "max_attempts" }, { b:failure(0) })
      assert.equal(0, b:success(0))
      assert.equal(0, b:attempts())
      assert.equal(1, b:failure(0))
      assert.equal(1, b:attempts())
      local one = backoff.constant { delay = 1, max_attempts = 1 }
      assert.same({ nil, "max_attempts" }, { one:failure(0) })
    end)

  it("a give-up leaves delay() as it was", function()
    local b = backoff.constant { delay = 3, max_attempts = 2 }
    assert.equal(0, b:delay())
    b:failure(0)
    b:failure(0)
    assert.equal(3, b:delay())
  end)

  it("is unchanged by any raising call", function()
    local o = { initial_delay = 1, jitter = "full", seed = 77,
      consider_actual_delay = true, max_delay = 50, start = 0 }
    local a, b = backoff.exponential(o), backoff.exponential(o)
    local bad = { "1", {}, 0 / 0, math.huge, -math.huge, true }
    for i = 1, 30 do
      for _, v in ipairs(bad) do
        assert.has_error(function() b:failure(v) end)
        assert.has_error(function() b:success(v) end)
        assert.has_error(function() b:reset(v) end)
        assert.has_error(function() b:elapsed(v) end)
      end
      local op = i % 4 == 0 and "success" or "failure"
      assert.same({ a[op](a, i) }, { b[op](b, i) })
      assert.equal(a:attempts(), b:attempts())
      assert.equal(a:delay(), b:delay())
    end
  end)

  it("names the method and the argument in a bad-timestamp error",
    function()
      local b = backoff.constant { delay = 1 }
      assert.error_matches(function() b:failure("10") end,
        "timestamp must be a finite number (got '10')", nil, true)
      assert.error_matches(function() b:failure("10") end, "failure", nil,
        true)
      assert.error_matches(function() b:success(0 / 0) end, "success", nil,
        true)
    end)

  it("names the method in the timestamp error, even via pcall",
    function()
      local b = backoff.constant { delay = 1 }
      for _, name in ipairs { "failure", "success", "elapsed", "reset" } do
        for bad, shown in pairs { ["10"] = "'10'", [true] = "true",
                                  [math.huge] = "inf" } do
          local ok, err = pcall(b[name], b, bad)
          assert.is_false(ok)
          assert.matches("bad argument #2 to '" .. name .. "' (timestamp "
            .. "must be a finite number (got " .. shown .. "))", err, nil,
            true)
        end
        local ok, err = pcall(b[name], b, 0 / 0)
        assert.is_false(ok)
        assert.matches("(got nan)", err, nil, true)
      end
      assert.equal(0, b:attempts())
    end)

  it("reads the time from the clock option", function()
    local now = 100
    local b = backoff.constant { delay = 2, consider_actual_delay = true,
      clock = function() return now end }
    assert.equal(0, b:elapsed())
    assert.equal(2, b:failure())
    now = 101
    assert.equal(1, b:elapsed())
    assert.equal(3, b:failure())
    assert.is_function(b:config().clock)
  end)

  it("reports a clock that returns a non-number", function()
    local b = backoff.constant { delay = 1, start = 0,
      clock = function() return "soon" end }
    assert.error_matches(function() b:failure() end,
      "clock must return a finite number (got 'soon')", nil, true)
    assert.equal(1, b:failure(1))
    assert.error_matches(function()
      backoff.constant { delay = 1, clock = function() return 0 / 0 end }
    end, "backoff.constant: option 'clock' must return a finite number",
      nil, true)
  end)

  it("uses the start option for max_actual_duration and elapsed", function()
    local b = backoff.constant { delay = 1, max_actual_duration = 5,
      start = 1000 }
    assert.equal(3, b:elapsed(1003))
    assert.equal(0, b:elapsed(900))     -- before the start: no time
    assert.equal(1, b:failure(1004.9))
    assert.same({ nil, "max_actual_duration" }, { b:failure(1005) })
    assert.equal(1000, b:config().start)
  end)

  it("starts at the default clock's now without a start option", function()
    local t0 = backoff.now()
    local b = backoff.constant { delay = 1 }
    local e = b:elapsed()
    assert.is_true(e >= 0 and e < backoff.now() - t0 + 1e-3)
    assert.is_nil(b:config().start)
  end)

  it("reset(ts) returns the object, fresh and started at ts", function()
    local b = backoff.fibonacci { initial_delay1 = 1, initial_delay2 = 1,
      max_attempts = 5, start = 0 }
    for _ = 1, 3 do b:failure(1) end
    assert.equal(b, b:reset(50))
    assert.equal(0, b:attempts())
    assert.equal(0, b:delay())
    assert.equal(5, b:elapsed(55))
    assert.equal(1, b:failure(51))
    assert.equal(1, b:failure(51))
    assert.equal(2, b:failure(51))
  end)

  it("clone() has the configuration and a fresh state", function()
    local b = backoff.limd { initial_delay = 2, delay_increment_on_failure = 4,
      delay_multiple_on_success = 0.2, min_delay = 1, start = 7 }
    b:failure(8) b:failure(8)
    local c = b:clone()
    assert.are_not.equal(b, c)
    assert.same(b:config(), c:config())
    assert.equal(0, c:attempts())
    assert.equal(0, c:delay())
    assert.equal(1, c:elapsed(8))       -- start is the start option
    assert.equal(2, c:failure(8))
    assert.equal(10, b:failure(8))
  end)
end)
