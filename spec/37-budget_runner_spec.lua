-- The runner's budget side (backoff.retry with ropts.budget): the
-- protocol of /work/notes/budget-protocol.md as the runner speaks it.
-- record after every attempt, first attempts included; withdraw with
-- ropts.retry_cost before each retry; the methods checked before fn
-- runs; the legacy deposit path for objects without record.

local backoff = require "backoff"
local budget = require "backoff.budget"

local nosleep = function() end

-- a budget that logs every call and allows `allow` retries
local function logger(allow, with_record)
  local b = { log = {}, left = allow }
  function b:withdraw(c)
    self.log[#self.log + 1] = { "withdraw", c }
    if self.left <= 0 then return false end
    self.left = self.left - 1
    return true
  end
  function b:deposit(n) self.log[#self.log + 1] = { "deposit", n } end
  if with_record ~= false then
    function b:record(ok, attempt, cost)
      self.log[#self.log + 1] = { "record", ok, attempt, cost }
    end
  end
  return b
end

local function flaky(fails)
  return function(n)
    if n <= fails then return nil, "e" .. n end
    return "ok", n
  end
end

describe("the runner tells a budget about every attempt", function()
  it("records each failure before asking for the retry, then the "
     .. "success", function()
    local b = logger(10)
    local r, n = backoff.retry(backoff.constant { delay = 0,
      max_attempts = 20 }, flaky(2),
      { budget = b, sleep = nosleep })
    assert.same({ "ok", 3 }, { r, n })
    assert.same({
      { "record", false, 1, nil }, { "withdraw", nil },
      { "record", false, 2, nil }, { "withdraw", nil },
      { "record", true, 3, nil },
    }, b.log)
  end)

  it("records a first-attempt success, and nothing else", function()
    local b = logger(10)
    backoff.retry(backoff.constant { delay = 0,
      max_attempts = 20 }, flaky(0), { budget = b })
    assert.same({ { "record", true, 1 } }, b.log)
  end)

  it("passes ropts.retry_cost(err, attempt) to withdraw and to record",
     function()
    local b = logger(10)
    local seen = {}
    backoff.retry(backoff.constant { delay = 0, max_attempts = 20 }, flaky(2), {
      budget = b, sleep = nosleep,
      retry_cost = function(err, attempt)
        seen[#seen + 1] = err .. "@" .. attempt
        return attempt * 10
      end })
    assert.same({ "e1@1", "e2@2" }, seen)
    assert.same({
      { "record", false, 1, nil }, { "withdraw", 10 },
      { "record", false, 2, 10 }, { "withdraw", 20 },
      { "record", true, 3, 20 },
    }, b.log)
  end)

  it("gives up with reason budget when withdraw refuses, recorded",
     function()
    local b = logger(1)
    local r = { backoff.retry(backoff.constant { delay = 0,
      max_attempts = 20 }, flaky(5),
      { budget = b, sleep = nosleep }) }
    assert.same({ nil, "e2", "budget" }, r)
    assert.same({
      { "record", false, 1, nil }, { "withdraw", nil },
      { "record", false, 2, nil }, { "withdraw", nil },
    }, b.log)
  end)

  it("records the failure that ends the run at max_attempts", function()
    local b = logger(10)
    local r = { backoff.retry(backoff.constant { delay = 0,
      max_attempts = 2 }, flaky(5), { budget = b, sleep = nosleep }) }
    assert.equal("max_attempts", r[3])
    assert.same({ "record", false, 2, nil }, b.log[#b.log])
  end)

  it("does not record a failure that retry_on refuses (the caller's "
     .. "error, not the upstream's)", function()
    local b = logger(10)
    local r = { backoff.retry(backoff.constant { delay = 0,
      max_attempts = 20 }, flaky(5), {
      budget = b, sleep = nosleep,
      retry_on = function(err) return err ~= "e2" end }) }
    assert.same({ nil, "e2", "retry_on" }, r)
    assert.same({ { "record", false, 1, nil }, { "withdraw", nil } }, b.log)
  end)

  it("gives back what a retry cancelled by the deadline paid", function()
    local now = 0
    local b = logger(10)
    local r = { backoff.retry(backoff.constant { delay = 0.5,
      max_actual_duration = 1, clock = function() return now end },
      function() return nil, "e" end, {
        budget = b, retry_cost = function() return 7 end,
        sleep = function(d) now = now + d + 1 end }) }
    assert.equal("max_actual_duration", r[3])
    assert.same({ { "record", false, 1, nil }, { "withdraw", 7 },
                  { "deposit", 7 } }, b.log)
  end)

  it("keeps the legacy calls for a budget without record", function()
    local b = logger(10, false)
    backoff.retry(backoff.constant { delay = 0, max_attempts = 20 }, flaky(1),
      { budget = b, sleep = nosleep })
    assert.same({ { "withdraw", nil }, { "deposit", nil } }, b.log)
  end)
end)

describe("the runner checks the budget before fn runs", function()
  local p = backoff.constant { delay = 0, max_attempts = 20 }

  local function refuses(bud, text)
    local ran = false
    local ok, err = pcall(backoff.retry, p, function()
      ran = true
      return nil, "x"
    end, { budget = bud, sleep = nosleep })
    assert.is_false(ok)
    assert.is_false(ran, "fn ran before the check")
    assert.matches("backoff.retry: option 'budget' must be a budget", err,
                   1, true)
    assert.matches(text, err, 1, true)
  end

  it("refuses {} and objects missing withdraw, or record and deposit",
     function()
    refuses({}, "table without a withdraw method")
    refuses({ withdraw = 5 }, "table without a withdraw method")
    refuses({ withdraw = print }, "without a record or deposit method")
    refuses({ withdraw = print, record = true },
            "without a record or deposit method")
    refuses(5, "got number")
    refuses("budget", "got string")
  end)

  -- a field the runner calls that is not a method failed with a raw
  -- "attempt to call a string value" after fn ran
  it("refuses a budget whose record, deposit, allows or throttle_cost "
     .. "is not a method", function()
    refuses({ withdraw = print, deposit = print, record = "x" },
            "table whose record is a string, not a method")
    refuses({ withdraw = print, record = print, deposit = 1 },
            "table whose deposit is a number, not a method")
    refuses({ withdraw = print, record = print, throttle_cost = 9 },
            "table whose throttle_cost is a number, not a method")
    refuses({ withdraw = print, record = print, allows = true },
            "table whose allows is a boolean, not a method")
    -- data fields of those names are a user budget's business
    local ok = pcall(backoff.retry, p, function() return 1 end,
      { budget = { withdraw = print, record = print, cost = 5,
                   tokens = 12 } })
    assert.is_true(ok)
    refuses(io.stdout, "userdata without a withdraw method")
  end)

  it("refuses a retry_cost that is not a function, and bad costs at "
     .. "the retry", function()
    local ok, err = pcall(backoff.retry, p, flaky(0), { retry_cost = 5 })
    assert.is_false(ok)
    assert.matches("option 'retry_cost' must be a function", err, 1, true)
    for _, v in ipairs { -1, 0 / 0, 1 / 0, 2.5, "5", {} } do
      local b = budget {}
      ok, err = pcall(backoff.retry, p, flaky(1), { budget = b,
        sleep = nosleep, retry_cost = function() return v end })
      assert.is_false(ok)
      assert.matches("ropts.retry_cost must return nil or an integer", err,
                     1, true)
      assert.equal(500, b:tokens())       -- nothing was taken
    end
  end)
end)

describe("the runner with the budget kinds", function()
  it("the recommended budget stops retrying a dead upstream after its "
     .. "reserve", function()
    local t = 0
    local b = budget.recommended { clock = function() return t end }
    local p0 = backoff.constant { delay = 0, max_attempts = 5 }
    for _ = 1, 200 do                     -- 20 requests/s: a reserve of 8
      t = t + 0.05
      backoff.retry(p0, flaky(0), { budget = b })
    end
    assert.equal(8, b:reserve())
    local calls = 0
    local dead = function()
      calls = calls + 1
      return nil, "dead"
    end
    local p = backoff.constant { delay = 0, max_attempts = 5 }
    local reasons = {}
    for _ = 1, 20 do
      local _, _, reason = backoff.retry(p, dead, { budget = b,
                                                    sleep = nosleep })
      reasons[#reasons + 1] = reason
    end
    assert.equal(20 + 8, calls)           -- 20 first attempts, 8 retries
    assert.equal("budget", reasons[20])
    assert.equal(0, b:tokens())
    -- a success earns retries back
    backoff.retry(p, flaky(0), { budget = b })
    assert.is_true(b:tokens() > 0)
  end)

  it("the recommended budget gives a slow client's dead upstream 8% of "
     .. "its requests", function()
    local t = 0
    local b = budget.recommended { clock = function() return t end }
    local p = backoff.constant { delay = 0, max_attempts = 5 }
    for _ = 1, 60 do                      -- 5 requests/s: a reserve of 4
      t = t + 0.2
      backoff.retry(p, flaky(0), { budget = b })
    end
    local calls = 0
    local dead = function()
      calls = calls + 1
      return nil, "dead"
    end
    for _ = 1, 50 do                      -- 10 s, dead
      t = t + 0.2
      backoff.retry(p, dead, { budget = b, sleep = nosleep })
    end
    assert.equal(50 + 4, calls)           -- 0.08 x 50 requests: 4 retries
  end)

  it("a retry after a hint (the server said it is overloaded) costs the "
     .. "budget's throttle_cost: the recommended budget never makes it",
     function()
    local t = 0
    local b = budget.recommended { clock = function() return t end }
    local p = backoff.constant { delay = 0, max_attempts = 20 }
    for _ = 1, 200 do                     -- 20 requests/s: a reserve of 8
      t = t + 0.05
      backoff.retry(p, flaky(0), { budget = b })
    end
    local r = { backoff.retry(p, flaky(3), { budget = b, sleep = nosleep,
      retry_after = function(err) return err == "e1" and 0 or nil end }) }
    assert.same({ nil, "e1", "budget" }, r)
    assert.equal(8, b:tokens())          -- nothing taken
    -- without a hint, the same failure is retried
    r = { backoff.retry(p, flaky(1), { budget = b, sleep = nosleep }) }
    assert.same({ "ok", 2 }, r)
    -- ropts.retry_cost, when given, decides instead
    r = { backoff.retry(p, flaky(1), { budget = b, sleep = nosleep,
      retry_after = function() return 0 end,
      retry_cost = function() return 1 end }) }
    assert.same({ "ok", 2 }, r)
    -- a budget without throttle_cost pays its own cost after a hint
    local tb = budget { capacity = 10, cost = 5 }
    r = { backoff.retry(p, flaky(1), { budget = tb, sleep = nosleep,
      retry_after = function() return 0 end }) }
    assert.same({ "ok", 2 }, r)
    assert.equal(10, tb:tokens())        -- 10 - 5 + 5 refunded
  end)

  it("the token bucket refunds through record as it did through deposit",
     function()
    local b = budget { capacity = 20, cost = 5, refund = 1 }
    local p = backoff.constant { delay = 0, max_attempts = 20 }
    backoff.retry(p, flaky(2), { budget = b, sleep = nosleep })
    assert.equal(20 - 10 + 5, b:tokens())
    backoff.retry(p, flaky(0), { budget = b })
    assert.equal(16, b:tokens())
  end)

  it("a gRPC throttle is told of first-attempt failures too", function()
    local b = budget.grpc { max_tokens = 4, token_ratio = 1 }
    local p = backoff.constant { delay = 0, max_attempts = 1 }
    for _ = 1, 2 do backoff.retry(p, flaky(1), { budget = b }) end
    assert.equal(2, b:tokens())          -- 4 - 2 failures, no retry made
    assert.is_false(b:allows())          -- at the threshold
  end)
end)
