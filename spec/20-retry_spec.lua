-- backoff.retry: the runner, with fake sleeps and with a coroutine
-- scheduler whose sleep and I/O yield (as ngx.sleep and cosockets do).
local backoff = require "backoff"

-- an operation that fails `fails` times (returning nil, err or raising
-- every other time), then returns "ok", attempt, extra
local function flaky(fails, raise)
  local calls = 0
  return function(attempt)
    calls = calls + 1
    if calls <= fails then
      if raise and calls % 2 == 0 then error({ code = calls }) end
      return nil, "fail " .. calls
    end
    return "ok", attempt, "extra"
  end
end

local function recorder()
  local slept = {}
  return slept, function(d) slept[#slept + 1] = d end
end

describe("backoff.retry", function()
  it("returns every result of the first success", function()
    local slept, sleep = recorder()
    local a, b, c = backoff.retry(backoff.constant { delay = 1,
      max_attempts = 3 }, flaky(0), { sleep = sleep })
    assert.same({ "ok", 1, "extra" }, { a, b, c })
    assert.same({}, slept)
  end)

  it("retries failures, sleeping each delay of the policy", function()
    local slept, sleep = recorder()
    local seen = {}
    local policy = backoff.exponential { initial_delay = 1, max_delay = 5,
                                        max_attempts = 10 }
    local r, attempt = backoff.retry(policy, flaky(4), { sleep = sleep,
      on_retry = function(err, delay, n)
        seen[#seen + 1] = { err, delay, n }
      end })
    assert.equal("ok", r)
    assert.equal(5, attempt)
    assert.same({ 1, 2, 4, 5 }, slept)
    assert.same({ "fail 1", 1, 1 }, seen[1])
    assert.same({ "fail 4", 5, 4 }, seen[4])
  end)

  it("counts a raised error as a failure with retry_raised, and keeps "
     .. "the error value", function()
      local errs = {}
      local r = backoff.retry({ strategy = "constant", delay = 0,
                                max_attempts = 5 },
        flaky(3, true), { sleep = function() end, retry_raised = true,
          on_retry = function(e) errs[#errs + 1] = e end })
      assert.equal("ok", r)
      assert.same({ code = 2 }, errs[2])
    end)

  it("gives up with nil, the last error and the reason", function()
    local slept, sleep = recorder()
    local r, err, reason = backoff.retry(
      backoff.constant { delay = 2, max_attempts = 3 }, flaky(10),
      { sleep = sleep })
    assert.is_nil(r)
    assert.equal("fail 3", err)
    assert.equal("max_attempts", reason)
    assert.same({ 2, 2 }, slept)
  end)

  it("stops at once when retry_on says no", function()
    local slept, sleep = recorder()
    local asked = {}
    local r, err, reason = backoff.retry(backoff.constant { delay = 1,
      max_attempts = 10 }, flaky(10), { sleep = sleep, retry_on = function(e, n)
        asked[#asked + 1] = { e, n }
        return n < 2
      end })
    assert.same({ nil, "fail 2", "retry_on" }, { r, err, reason })
    assert.same({ 1 }, slept)
    assert.same({ { "fail 1", 1 }, { "fail 2", 2 } }, asked)
  end)

  it("uses the policy as a template: it is never changed", function()
    local policy = backoff.constant { delay = 1, max_attempts = 3 }
    backoff.retry(policy, flaky(10), { sleep = function() end })
    backoff.retry(policy, flaky(1), { sleep = function() end })
    assert.equal(0, policy:attempts())
    assert.equal(0, policy:delay())
  end)

  it("is also the method b:retry", function()
    local b = backoff.constant { delay = 0, max_attempts = 3 }
    assert.equal("ok", (b:retry(flaky(2), { sleep = function() end })))
    assert.has_error(function() b.retry({}, flaky(0)) end)
  end)

  it("passes per-attempt timeouts from the policy to fn", function()
    local now = 0
    local got = {}
    local policy = backoff.retry_timeouts { jitter_factor = 0,
      timeout_jitter_factor = 0, clock = function() return now end }
    backoff.retry(policy, function(n, timeout)
      got[n] = timeout
      now = now + timeout       -- each attempt runs into its timeout
      if n < 3 then return nil, "timeout" end
      return true
    end, { sleep = function(d) now = now + d end })
    assert.equal(25, got[1])
    assert.is_true(got[2] < got[1] and got[3] < got[2])
  end)

  it("passes nil timeouts when the policy has none", function()
    local got = "unset"
    backoff.retry(backoff.constant { delay = 0, max_attempts = 2 },
      function(_, t)
      got = t
      return true
    end)
    assert.is_nil(got)
  end)

  it("sleeps for real with backoff.sleep outside OpenResty", function()
    local t0 = backoff.now()
    assert.equal("ok", (backoff.retry(backoff.constant { delay = 0.01,
      max_attempts = 3 }, flaky(2))))
    assert.is_true(backoff.now() - t0 >= 0.019)
  end)

  it("rejects bad arguments by name", function()
    local p = backoff.constant { delay = 0, max_attempts = 2 }
    assert.error_matches(function() backoff.retry(p, 42) end,
      "argument 'fn' must be a function", nil, true)
    assert.error_matches(function() backoff.retry(42, flaky(0)) end,
      "argument 'policy' must be a backoff object or an options table",
      nil, true)
    assert.error_matches(function() backoff.retry({ delay = 1 }, flaky(0)) end,
      "policy table needs a 'strategy' field", nil, true)
    assert.error_matches(function()
      backoff.retry(p, flaky(0), { slep = print })
    end, "unknown option 'slep'", nil, true)
    assert.error_matches(function()
      backoff.retry(p, flaky(0), { sleep = 1 })
    end, "option 'sleep' must be a function", nil, true)
    assert.error_matches(function()
      backoff.retry({ strategy = "constant", delay = -1, max_attempts = 2 },
        flaky(0))
    end, "option 'delay' must be a finite number >= 0", nil, true)
  end)
end)

describe("backoff.retry in coroutines", function()
  -- A tiny scheduler: tasks yield {"sleep", seconds} or {"io"}; virtual
  -- time advances to the earliest wake-up.
  local function run(tasks)
    local now, queue, log = 0, {}, {}
    for i, f in ipairs(tasks) do
      queue[#queue + 1] = { co = coroutine.create(f), at = 0, id = i }
    end
    while #queue > 0 do
      table.sort(queue, function(a, b)
        return a.at < b.at or (a.at == b.at and a.id < b.id) end)
      local t = table.remove(queue, 1)
      now = math.max(now, t.at)
      local ok, what, arg = coroutine.resume(t.co, now)
      assert(ok, what)
      if coroutine.status(t.co) ~= "dead" then
        log[#log + 1] = { t.id, what, now }
        t.at = now + (what == "sleep" and arg or 0.001)
        queue[#queue + 1] = t
      else
        log[#log + 1] = { t.id, "done", now, what }
      end
    end
    return log
  end

  local function yielding_sleep(d) coroutine.yield("sleep", d) end

  it("lets sleep and fn yield, on every Lua version", function()
    local policy = backoff.exponential { initial_delay = 1, max_attempts = 5 }
    local results = {}
    local function task(id, fails)
      return function()
        local r, n = backoff.retry(policy, function(attempt)
          coroutine.yield("io")                  -- fn yields too
          if attempt <= fails then return nil, "busy" end
          return id, attempt
        end, { sleep = yielding_sleep })
        results[id] = { r, n }
        return r
      end
    end
    local log = run { task("a", 3), task("b", 1), task("c", 0) }
    assert.same({ "a", 4 }, results.a)
    assert.same({ "b", 2 }, results.b)
    assert.same({ "c", 1 }, results.c)
    -- the tasks interleaved: c finished before a slept its last delay
    local done = {}
    for i, e in ipairs(log) do
      if e[2] == "done" then done[e[1]] = i end
    end
    assert.is_true(done[3] < done[2] and done[2] < done[1])
    -- a slept 1 + 2 + 4 virtual seconds (plus 4 ms of "io")
    local last = log[done[1]][3]
    assert.is_true(last >= 7 and last < 7.01, last)
  end)

  it("lets fn yield, protected or not", function()
    for _, ropts in ipairs { {}, { retry_raised = true } } do
      local co = coroutine.wrap(function()
        return backoff.retry(backoff.constant { delay = 0, max_attempts = 2 },
          function()
            local v = coroutine.yield("inside")
            return v
          end, ropts)
      end)
      assert.equal("inside", co())
      assert.equal("resumed", co("resumed"))
    end
  end)

  it("keeps a raised error when fn has yielded first", function()
    local co = coroutine.wrap(function()
      return backoff.retry(backoff.constant { delay = 0, max_attempts = 2 },
        function()
          coroutine.yield()
          error("boom", 0)
        end, { sleep = function() end, retry_raised = true })
    end)
    co()
    co()
    local r, err, reason = co()
    assert.is_nil(r)
    assert.equal("max_attempts", reason)
    -- the message as raised, then fn's traceback
    assert.equal("boom\nstack traceback:", err:sub(1, 21))
  end)
end)
