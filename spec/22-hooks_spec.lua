-- backoff.retry's hooks: on_success, on_giveup, ropts.metrics, and the
-- reason retry_on may give.  A fake clock throughout.
local backoff = require "backoff"

local function pack(...) return { n = select("#", ...), ... } end

local function world()
  local w = { now = 100, log = {} }
  function w.clock() return w.now end
  function w.sleep(d) w.now = w.now + d end
  return w
end

-- fn failing `fails` times, each attempt taking `took` seconds
local function flaky(w, fails, took)
  return function(attempt)
    w.now = w.now + (took or 0)
    if attempt <= fails then return nil, "e" .. attempt end
    return "ok", attempt
  end
end

-- a stand-in for a backoff.metrics recorder
local function fake_metrics()
  local m = { runs = {} }
  function m:run(ok, attempts, reason, hints)
    self.runs[#self.runs + 1] = { ok, attempts, reason, hints }
  end
  return m
end

-- every hook, logging into one list
local function hooks(log, extra)
  local r = {
    -- on_success(res1, elapsed, attempts): the hooks' one shape
    on_success = function(_, e, a) log[#log + 1] = { "success", a, e } end,
    on_giveup = function(err, reason, a)
      log[#log + 1] = { "giveup", err, reason, a }
    end,
  }
  for k, v in pairs(extra or {}) do r[k] = v end
  return r
end

describe("backoff.retry's on_success", function()
  it("gets the attempts and the time taken, first try included",
    function()
      for _, duration in ipairs { 0, 10 } do  -- without, with a deadline
        local w, log = world(), {}
        local p = backoff.constant { delay = 1, clock = w.clock,
          max_actual_duration = duration, max_attempts = 5 }
        local ropts = hooks(log, { sleep = w.sleep })
        assert.same({ "ok", 1 }, { backoff.retry(p, flaky(w, 0, 0.25),
          ropts) })
        assert.same({ { "success", 1, 0.25 } }, log)
        log = {}
        ropts = hooks(log, { sleep = w.sleep })
        assert.same({ "ok", 3 }, { backoff.retry(p, flaky(w, 2, 0.5),
          ropts) })
        -- 3 attempts of 0.5 s and 2 delays of 1 s
        assert.same({ { "success", 3, 3.5 } }, log)
      end
    end)

  it("works with a policy given as an options table", function()
    local w, log = world(), {}
    backoff.retry({ strategy = "constant", delay = 2, clock = w.clock,
                    max_attempts = 3 },
      flaky(w, 1, 1), hooks(log, { sleep = w.sleep }))
    assert.same({ { "success", 2, 4 } }, log)
  end)
end)

describe("backoff.retry's on_success elapsed", function()
  -- a clock that steps back counts as no time passed, as b:elapsed does
  it("is never negative when the policy's clock goes back", function()
    for _, duration in ipairs { 0, 100 } do
      for _, fails in ipairs { 0, 1 } do
        local w, log = world(), {}
        local p = backoff.constant { delay = 0, clock = w.clock,
          max_actual_duration = duration, max_attempts = 3 }
        backoff.retry(p, flaky(w, fails, -10), hooks(log, {
          sleep = function() end }))
        assert.equal("success", log[1][1])
        assert.equal(0, log[1][3])
      end
    end
  end)
end)

describe("backoff.retry's on_giveup", function()
  it("gets the last error, the reason and the attempts", function()
    local w = world()
    local cases = {
      { backoff.constant { delay = 0, max_attempts = 3 }, {},
        { "giveup", "e3", "max_attempts", 3 } },
      { backoff.constant { delay = 0, max_attempts = 9 },
        { retry_on = function(_, a) return a < 2 end },
        { "giveup", "e2", "retry_on", 2 } },
      { backoff.constant { delay = 1, max_actual_duration = 2.5,
          clock = w.clock }, {},
        { "giveup", "e3", "max_actual_duration", 3 } },  -- at 0, 1, 2 s
      { backoff.constant { delay = 0, max_hint = 1, max_attempts = 9 },
        { retry_after = function() return 5 end },
        { "giveup", "e1", "retry_after", 1 } },
      { backoff.constant { delay = 0, max_attempts = 9 },
        { budget = { withdraw = function() return false end,
                     deposit = function() end } },
        { "giveup", "e1", "budget", 1 } },
    }
    for i, c in ipairs(cases) do
      local log = {}
      local ropts = hooks(log, { sleep = w.sleep })
      for k, v in pairs(c[2]) do ropts[k] = v end
      local r = pack(backoff.retry(c[1], flaky(w, 100), ropts))
      assert.same({ n = 3, nil, c[3][2], c[3][3] }, r, "case " .. i)
      assert.same({ c[3] }, log, "case " .. i)
    end
  end)

  it("is called with 0 attempts when the deadline had passed", function()
    local log, called = {}, false
    local p = backoff.constant { delay = 0, max_actual_duration = 1,
      start = 0, clock = function() return 5 end }
    local r = pack(backoff.retry(p, function() called = true end,
      hooks(log)))
    assert.same({ n = 3, nil, "the deadline had passed: no attempt was made",
      "max_actual_duration" }, r)
    assert.same({ { "giveup", "the deadline had passed: no attempt was "
      .. "made", "max_actual_duration", 0 } }, log)
    assert.is_false(called)
  end)

  it("is not called for a success, nor on_success for a give-up",
    function()
      local w, log = world(), {}
      backoff.retry(backoff.constant { delay = 0, max_attempts = 2 },
        flaky(w, 1), hooks(log, { sleep = w.sleep }))
      backoff.retry(backoff.constant { delay = 0, max_attempts = 2 },
        flaky(w, 5), hooks(log, { sleep = w.sleep }))
      assert.equal(2, #log)
      assert.equal("success", log[1][1])
      assert.equal("giveup", log[2][1])
    end)
end)

describe("backoff.retry's retry_on reason", function()
  it("gives up with retry_on's second result as the reason", function()
    local log = {}
    local r = pack(backoff.retry(backoff.constant { delay = 0,
      max_attempts = 9 },
      function() return nil, "bad request" end,
      hooks(log, { retry_on = function() return false, "not_idempotent" end
      })))
    assert.same({ n = 3, nil, "bad request", "not_idempotent" }, r)
    assert.same({ { "giveup", "bad request", "not_idempotent", 1 } }, log)
  end)

  it("keeps 'retry_on' when there is no second result", function()
    for _, second in ipairs { false, nil } do
      local r = pack(backoff.retry(backoff.constant { delay = 0,
        max_attempts = 9 },
        function() return nil, "x" end,
        { retry_on = function() return nil, second end }))
      assert.equal("retry_on", r[3])
    end
  end)

  it("raises, naming retry_on, for a reason that is not a name",
    function()
      for _, bad in ipairs { "", "has space", "1st", ("x"):rep(65), 42,
                             true, {} } do
        assert.error_matches(function()
          backoff.retry(backoff.constant { delay = 0, max_attempts = 9 },
            function() return nil, "x" end,
            { retry_on = function() return false, bad end })
        end, "ropts.retry_on's second result must be nil or a reason",
        nil, true)
      end
    end)
end)

describe("backoff.retry's metrics", function()
  it("reports each run once: outcome, attempts, reason, hints", function()
    local w, m = world(), fake_metrics()
    local p = backoff.constant { delay = 0.1, max_attempts = 4 }
    backoff.retry(p, flaky(w, 0), { metrics = m })
    backoff.retry(p, flaky(w, 2), { metrics = m, sleep = w.sleep,
      retry_after = function(_, a) return a == 1 and 0.5 or nil end })
    backoff.retry(p, flaky(w, 9), { metrics = m, sleep = w.sleep,
      retry_after = function() return 0 end })
    backoff.retry(backoff.constant { delay = 0, max_hint = 1,
                                    max_attempts = 9 }, flaky(w, 9),
      { metrics = m, sleep = w.sleep,
        retry_after = function(_, a) return a * 0.75 end })
    assert.same({
      { true, 1, nil, 0 },
      { true, 3, nil, 1 },                  -- one retry waited a hint
      { false, 4, "max_attempts", 3 },
      { false, 2, "retry_after", 1 },       -- 0.75 waited, 1.5 refused
    }, m.runs)
  end)

  it("counts before calling the hooks, so a hook that raises loses no "
     .. "count", function()
    local m = fake_metrics()
    assert.has_error(function()
      backoff.retry(backoff.constant { delay = 0, max_attempts = 2 },
        function() return nil, "x" end, { metrics = m, sleep = function() end,
          on_giveup = function() error("hook failed") end })
    end, "hook failed")
    assert.same({ { false, 2, "max_attempts", 0 } }, m.runs)
    assert.has_error(function()
      backoff.retry(backoff.constant { delay = 0, max_attempts = 2 },
        function() return 1 end,
        { metrics = m, on_success = function() error("hook failed") end })
    end)
    assert.same({ true, 1, nil, 0 }, m.runs[2])
  end)

  it("works with the real recorder", function()
    local metrics = require "backoff.metrics"
    metrics.reset()
    local m = metrics.new("hooks spec", { shared = false })
    local w = world()
    local p = backoff.constant { delay = 0, max_attempts = 3 }
    backoff.retry(p, flaky(w, 1), { metrics = m, sleep = w.sleep })
    backoff.retry(p, flaky(w, 5), { metrics = m, sleep = w.sleep })
    assert.same({ attempts = 5, retries = 3, successes = 1,
      successes_after_retry = 1, budget_refusals = 0, hints_honoured = 0,
      hedges = 0, hedges_won = 0, hedges_cancelled = 0,
      hedge_budget_refusals = 0, giveups = { max_attempts = 1 } },
      m:counts())
  end)
end)

describe("backoff.retry's hook options", function()
  local p = backoff.constant { delay = 0, max_attempts = 2 }
  local ok = function() return true end
  it("are checked by name", function()
    local cases = {
      { { on_success = 1 }, "option 'on_success' must be a function" },
      { { on_giveup = "f" }, "option 'on_giveup' must be a function" },
      { { metrics = 5 }, "option 'metrics' must be a backoff.metrics" },
      { { metrics = {} }, "option 'metrics' must be a backoff.metrics" },
      { { metrics = { run = 1 } },
        "option 'metrics' must be a backoff.metrics" },
      { { metrics = io.stdout },
        "option 'metrics' must be a backoff.metrics" },
      { { metrics = newproxy and newproxy(true) or io.stdout },
        "option 'metrics' must be a backoff.metrics" },
    }
    for _, c in ipairs(cases) do
      assert.error_matches(function() backoff.retry(p, ok, c[1]) end, c[2],
        nil, true)
    end
  end)

  it("leave the happy path without hooks as it was: no clock read",
    function()
      local reads = 0
      local q = backoff.constant { delay = 0, max_attempts = 2,
        clock = function() reads = reads + 1 return 0 end }
      reads = 0
      backoff.retry(q, ok, { on_giveup = print, metrics = fake_metrics() })
      assert.equal(0, reads)
      backoff.retry(q, ok, { on_success = function() end })
      assert.equal(2, reads)                -- start and end: the time taken
    end)
end)
