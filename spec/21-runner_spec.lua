-- backoff.retry, second round (issues 10, 11, 12): the lazy happy path,
-- the same delays and timeouts as an eager reference runner, the
-- deadline that holds, no bunching, sleeps in nginx, hints, budgets and
-- ropts checks.  Time is a fake clock throughout.
local backoff = require "backoff"

local unpack = table.unpack or unpack  -- luacheck: ignore 143
local HERE = debug.getinfo(1, "S").short_src
local PUC51 = _VERSION == "Lua 5.1" and not rawget(_G, "jit")

local function pack(...) return { n = select("#", ...), ... } end

-- a fake world: a clock, a sleep that advances it, and a log of what
-- the runner did ({ "call", attempt, timeout, at } / { "sleep", d, at })
local function world()
  local w = { now = 0, log = {} }
  function w.clock() return w.now end
  function w.sleep(d)
    w.log[#w.log + 1] = { "sleep", d, w.now }
    w.now = w.now + d
  end
  -- fn for runs: script(attempt, timeout) -> seconds taken, results...
  function w.fn(script)
    return function(attempt, timeout)
      w.log[#w.log + 1] = { "call", attempt, timeout, w.now }
      local r = pack(script(attempt, timeout))
      w.now = w.now + r[1]
      if r[2] == "raise" then error(r[3], 0) end
      return unpack(r, 2, r.n)
    end
  end
  return w
end

-- The eager reference runner, as the first round wrote it: clone at
-- the start, b:failure() after each failure, sleep each delay.  With
-- guards, the deadline rules of the new runner are laid on top of the
-- object's own answers (timeouts cut to the time left, a sleep reaching
-- the deadline gives up): that is what the new runner must do with
-- reference_delays = true and min_attempt_time = 0.
local function reference(policy, fn, ropts, guards)
  local b = policy:clone()
  local dur = b:config().max_actual_duration
  local clock = b:config().clock
  local function left() return dur - b:elapsed(clock()) end
  local timeout = b:timeout()
  if guards and dur > 0 and timeout and timeout > left() then
    timeout = left()
  end
  local attempt = 0
  while true do
    attempt = attempt + 1
    local r = pack(pcall(fn, attempt, timeout))
    if r[1] and r[2] then return unpack(r, 2, r.n) end
    local err
    if r[1] then err = r[3] else err = r[2] end
    if ropts.retry_on and not ropts.retry_on(err, attempt) then
      return nil, err, "retry_on"
    end
    local delay, t = b:failure()
    if delay == nil then return nil, err, t end
    if t ~= nil then timeout = t end
    if guards and dur > 0 and delay >= left() then
      return nil, err, "max_actual_duration"
    end
    ropts.sleep(delay)
    if guards and dur > 0 and timeout and timeout > left() then
      timeout = left()
    end
  end
end

-- a seeded stream of numbers in [0, 1) (the same on every Lua)
local function lcg(seed)
  local s = seed
  return function()
    s = (s * 1103515245 + 12345) % 2147483648
    return s / 2147483648
  end
end

-- scripts: how long each attempt takes and how it ends
local function scripts(seed)
  local r = lcg(seed)
  return {
    -- fails `n` times, quickly or slowly, returning or raising
    function(n) return function(attempt)
      local took = r() * 0.3
      if attempt > n then return took, "ok", attempt, nil end
      if r() < 0.3 then return took, "raise", { attempt = attempt } end
      return took, nil, "fail " .. attempt
    end end,
    -- hangs: each attempt takes its timeout (or 1 s), never succeeds
    function() return function(_, timeout)
      return timeout or 1, nil, "timeout"
    end end,
  }
end

local function run_both(policy_opts, strategy, ropts_extra, guards, seed, n)
  local results = {}
  for i, who in ipairs { "reference", "runner" } do
    local w = world()
    local opts = {}
    for k, v in pairs(policy_opts) do opts[k] = v end
    opts.clock = w.clock
    local policy = backoff.new(strategy, opts)
    local make = scripts(seed)[n and 1 or 2]
    local fn = w.fn(make(n))
    local ropts = { sleep = w.sleep }
    for k, v in pairs(ropts_extra or {}) do ropts[k] = v end
    if who == "runner" then ropts.retry_raised = true end
    local r
    if who == "reference" then
      ropts.reference_delays, ropts.min_attempt_time = nil, nil
      r = pack(reference(policy, fn, ropts, guards))
    else
      r = pack(backoff.retry(policy, fn, ropts))
    end
    results[i] = { log = w.log, r = r }
  end
  return results[1], results[2]
end

describe("backoff.retry against the eager reference runner", function()
  local plain = {
    { "constant", { delay = 0.5, max_attempts = 6 } },
    { "linear", { initial_delay = 0.1, jitter_factor = 0.3, seed = 3,
      max_attempts = 7 } },
    { "exponential", { initial_delay = 0.05, max_delay = 2, jitter = "full",
      seed = 11, max_attempts = 9 } },
    { "exponential", { initial_delay = 0.05, jitter = "equal", seed = 12,
      consider_actual_delay = true, max_attempts = 6 } },
    { "fibonacci", { initial_delay = 0.1, max_attempts = 7,
      jitter_factor = 0.5, seed = 13 } },
    { "decorrelated", { initial_delay = 0.1, max_delay = 5, seed = 5,
      max_attempts = 8 } },
    { "limd", { initial_delay = 1, delay_increment_on_failure = 2,
      delay_multiple_on_success = 0.5, consider_actual_delay = true,
      jitter_factor = 0.2, seed = 3, max_attempts = 8 } },
    { "mimd", { initial_delay = 0.2, delay_multiple_on_failure = 3,
      delay_multiple_on_success = 0.5, max_delay = 4, jitter = "full",
      seed = 9, max_attempts = 5 } },
  }

  it("sleeps the same delays and gives the same results, op for op, "
     .. "without max_actual_duration", function()
    local runs = 0
    for _, c in ipairs(plain) do
      for n = 0, 9 do
        for seed = 1, 3 do
          local ref, new = run_both(c[2], c[1], nil, false, seed, n)
          assert.same(ref.log, new.log)
          assert.same(ref.r, new.r)
          runs = runs + 1
        end
      end
    end
    assert.equal(#plain * 30, runs)
  end)

  it("asks retry_on the same questions and stops the same way", function()
    local stop = function(_, attempt) return attempt < 3 end
    for _, c in ipairs(plain) do
      local ref, new = run_both(c[2], c[1], { retry_on = stop }, false, 7, 9)
      assert.same(ref.log, new.log)
      assert.same(ref.r, new.r)
    end
  end)

  local timed = {
    { "retry_timeouts", { seed = 4, max_actual_duration = 10 } },
    { "retry_timeouts", { seed = 5 } },
    { "exponential", { initial_delay = 0.05, max_delay = 0.4,
      jitter = "full", max_actual_duration = 1, adjust_timeout_factor = 0.5,
      min_adjust_timeout = 0.05, seed = 21 } },
    { "decorrelated", { initial_delay = 0.1, max_delay = 3,
      max_actual_duration = 5, adjust_timeout_factor = 0.3,
      min_adjust_timeout = 0.1, timeout_jitter_factor = 0.2, seed = 22 } },
    { "fibonacci", { initial_delay = 0.2, max_actual_duration = 4,
      seed = 23, jitter_factor = 0.3 } },
    { "limd", { initial_delay = 0.3, delay_increment_on_failure = 0.2,
      delay_multiple_on_success = 0.5, consider_actual_delay = true,
      max_actual_duration = 3, adjust_timeout_factor = 0.6,
      min_adjust_timeout = 0.2, seed = 24 } },
  }

  -- what is compared: with reference_delays and min_attempt_time = 0,
  -- every delay slept and every timeout passed is the object's own, cut
  -- to the time left; the run stops where the reference would sleep
  -- into the deadline, and otherwise gives up with the same reason
  it("with max_actual_duration and reference_delays: the object's own "
     .. "delays and timeouts, cut at the deadline", function()
    for _, c in ipairs(timed) do
      for _, n in ipairs { 0, 1, 3, 6, 12, false } do
        for seed = 1, 3 do
          local ref, new = run_both(c[2], c[1],
            { reference_delays = true, min_attempt_time = 0 }, true, seed,
            n or nil)
          assert.same(ref.log, new.log)
          assert.same(ref.r, new.r)
        end
      end
    end
  end)

  it("with max_actual_duration, the default rule: never a shorter sleep "
     .. "than the object's, never past the deadline", function()
    for _, c in ipairs(timed) do
      for seed = 1, 3 do
        local ref, new = run_both(c[2], c[1], nil, true, seed, nil)
        local dur = backoff.new(c[1], c[2]):config().max_actual_duration
        -- the first attempt and its timeout are the same
        assert.same(ref.log[1], new.log[1])
        local sleeps = 0
        for _, e in ipairs(new.log) do
          if e[1] == "sleep" then
            sleeps = sleeps + 1
            assert.is_true(e[3] + e[2] < dur)
          else
            assert.is_true(e[4] < dur)
            if e[3] then assert.is_true(e[4] + e[3] <= dur) end
          end
        end
        assert.is_true(sleeps > 0)
        assert.equal("max_actual_duration", new.r[3])
        assert.is_true(#new.log <= #ref.log)
      end
    end
  end)
end)

describe("backoff.retry's happy path", function()
  local methods = getmetatable(backoff.constant { delay = 1 }).__index

  -- counts calls of methods[name] while f runs
  local function counting(names, f)
    local saved, counts = {}, {}
    for _, name in ipairs(names) do
      saved[name], counts[name] = methods[name], 0
      methods[name] = function(...)
        counts[name] = counts[name] + 1
        return saved[name](...)
      end
    end
    local ok, err = pcall(f)
    for name, m in pairs(saved) do methods[name] = m end
    assert(ok, err)
    return counts
  end

  it("clones nothing, reads no clock and calls no success()", function()
    local reads = 0
    local clock = function() reads = reads + 1; return 0 end
    local plain = backoff.exponential { initial_delay = 1, clock = clock,
                                        max_attempts = 3 }
    backoff.retry(plain, function() return true end)  -- facts cached
    reads = 0
    local counts = counting({ "clone", "success", "failure", "timeout" },
      function()
        for _ = 1, 3 do
          assert.equal("ok", (backoff.retry(plain, function()
            return "ok"
          end)))
          assert.equal("ok", (plain:retry(function() return "ok" end)))
        end
      end)
    assert.same({ clone = 0, success = 0, failure = 0, timeout = 0 },
                counts)
    assert.equal(0, reads)
  end)

  it("reads the clock once when a deadline matters, and clones nothing",
    function()
      local reads = 0
      local clock = function() reads = reads + 1; return 7 end
      local p = backoff.exponential { initial_delay = 1, clock = clock,
        max_actual_duration = 2, adjust_timeout_factor = 0.5,
        min_adjust_timeout = 0.1 }
      backoff.retry(p, function() return true end)   -- facts cached
      reads = 0
      local got
      local counts = counting({ "clone", "success" }, function()
        backoff.retry(p, function(_, t) got = t; return true end)
      end)
      assert.same({ clone = 0, success = 0 }, counts)
      assert.equal(1, reads)
      assert.equal(1, got)
    end)

  it("keeps each template's rules when calls alternate", function()
    local w = world()
    local plain = backoff.constant { delay = 0, clock = w.clock,
                                     max_attempts = 3 }
    local timed = backoff.constant { delay = 0, clock = w.clock,
      max_actual_duration = 4, adjust_timeout_factor = 0.5,
      min_adjust_timeout = 0.1 }
    for _ = 1, 3 do
      for _, c in ipairs { { plain, nil }, { timed, 2 }, { plain, nil } } do
        assert.same({ n = 2, "t", c[2] }, pack(c[1]:retry(function(_, t)
          return "t", t
        end)))
        assert.same({ n = 2, "t", c[2] }, pack(backoff.retry(c[1],
          function(_, t) return "t", t end)))
      end
    end
  end)

  it("passes every result on, trailing nils included", function()
    local p = backoff.constant { delay = 0, max_attempts = 10 }
    local r = pack(backoff.retry(p, function()
      return "a", nil, false, nil
    end))
    assert.same({ n = 4, "a", nil, false, nil }, r)
    r = pack(p:retry(function() return 1 end, { sleep = print }))
    assert.same({ n = 1, 1 }, r)
  end)

  -- on PUC 5.1 fn runs in a coroutine of its own (to let it yield), so
  -- each attempt allocates one there
  if not PUC51 then
    it("makes no garbage", function()
      local p = backoff.exponential { initial_delay = 1, max_attempts = 3 }
      local function ok() return true end
      for _ = 1, 100 do backoff.retry(p, ok) end     -- warm up, JIT
      collectgarbage()
      collectgarbage("stop")
      local before = collectgarbage("count")
      for _ = 1, 20000 do backoff.retry(p, ok); p:retry(ok) end
      local grown = (collectgarbage("count") - before) * 1024
      collectgarbage("restart")
      -- the first round made a clone, a table for ropts and one per
      -- attempt: over 100 bytes a call; now the JIT's traces at most
      assert.is_true(grown < 40000 * 2, grown)
    end)
  end
end)

describe("backoff.retry's deadline", function()
  local function readme_policy(w, extra)
    local o = { initial_delay = 0.05, max_delay = 0.4, jitter = "full",
      max_actual_duration = 1, adjust_timeout_factor = 0.5,
      min_adjust_timeout = 0.05, clock = w.clock }
    for k, v in pairs(extra or {}) do o[k] = v end
    return backoff.exponential(o)
  end

  it("holds against an upstream that hangs: no timeout, no sleep past it",
    function()
      for seed = 1, 50 do
        local w = world()
        local r = pack(backoff.retry(readme_policy(w, { seed = seed }),
          w.fn(function(_, t) return t, nil, "timeout" end),
          { sleep = w.sleep }))
        assert.same({ n = 3, nil, "timeout", "max_actual_duration" }, r)
        assert.is_true(w.now <= 1, w.now)
        for _, e in ipairs(w.log) do
          if e[1] == "call" then
            assert.is_true(e[4] + e[3] <= 1 and e[3] > 0)
            -- default min_attempt_time: min_adjust_timeout (0.05)
            assert.is_true(1 - e[4] >= 0.05)
          else
            assert.is_true(e[3] + e[2] < 1)
          end
        end
      end
    end)

  it("cuts the first timeout to the duration", function()
    local w = world()
    local p = backoff.exponential { initial_delay = 0.1, clock = w.clock,
      max_actual_duration = 1, adjust_timeout_factor = 0.9 }  -- floor 5
    assert.equal(5, p:timeout())
    local got
    backoff.retry(p, function(_, t) got = t; return 1 end)
    assert.equal(1, got)
  end)

  it("gives up before a sleep that would reach the deadline", function()
    local w = world()
    local p = backoff.constant { delay = 0.5, max_actual_duration = 1,
      clock = w.clock }
    local r = pack(backoff.retry(p,
      w.fn(function() return 0.3, nil, "503" end), { sleep = w.sleep }))
    -- 0.3 + 0.5 sleep, then at 1.1 the attempt ended past the deadline;
    -- the second sleep would end at 1.6: not taken
    assert.same({ n = 3, nil, "503", "max_actual_duration" }, r)
    assert.same({ { "call", 1, nil, 0 }, { "sleep", 0.5, 0.3 },
                  { "call", 2, nil, 0.8 } }, w.log)
  end)

  it("looks again after sleeping: a sleep that overshoots", function()
    local w = world()
    local p = backoff.constant { delay = 0.5, max_actual_duration = 1,
      clock = w.clock }
    local r = pack(backoff.retry(p,
      w.fn(function() return 0.1, nil, "503" end),
      { sleep = function(d) w.now = w.now + d + 0.45 end }))
    assert.same({ n = 3, nil, "503", "max_actual_duration" }, r)
    assert.equal(1, #w.log)                 -- no second attempt at 1.05
  end)

  it("starts no attempt with less than min_attempt_time left", function()
    local w = world()
    local p = backoff.constant { delay = 0.25, max_actual_duration = 1,
      clock = w.clock }
    backoff.retry(p, w.fn(function() return 0.125, nil, "503" end),
      { sleep = w.sleep, min_attempt_time = 0.3 })
    -- attempts at 0, 0.375: the next would start at 0.75 (0.25 left)
    assert.equal(3, #w.log)
    assert.same({ "call", 2, nil, 0.375 }, w.log[3])
    -- min_attempt_time = 0 allows it
    w = world()
    p = backoff.constant { delay = 0.25, max_actual_duration = 1,
      clock = w.clock }
    backoff.retry(p, w.fn(function() return 0.125, nil, "503" end),
      { sleep = w.sleep, min_attempt_time = 0 })
    assert.equal(5, #w.log)
    assert.same({ "call", 3, nil, 0.75 }, w.log[5])
  end)

  it("keeps the deadline of a template with a start option", function()
    local w = world()
    w.now = 5
    local p = backoff.constant { delay = 0.2, max_actual_duration = 1,
      clock = w.clock, start = 4.5 }
    local r = pack(backoff.retry(p, w.fn(function()
      return 0.1, nil, "503" end), { sleep = w.sleep }))
    assert.equal("max_actual_duration", r[3])
    assert.is_true(w.now < 5.5)
    -- past it already: no attempt at all
    w.now = 6
    r = pack(backoff.retry(p, function() error("called") end))
    assert.same({ n = 3, nil, "the deadline had passed: no attempt was made",
      "max_actual_duration" }, r)
  end)

  it("does not bunch retries before the deadline", function()
    -- exponential from 0.4, no jitter: the object caps each delay at
    -- half the time left, the runner sleeps the strategy's own delay
    local function run(reference_delays)
      local w = world()
      local p = backoff.exponential { initial_delay = 0.4, clock = w.clock,
        max_actual_duration = 1, adjust_timeout_factor = 0.5,
        min_adjust_timeout = 0.01 }
      local slept = {}
      backoff.retry(p, w.fn(function() return 0.001, nil, "503" end), {
        sleep = function(d) slept[#slept + 1] = d; w.sleep(d) end,
        reference_delays = reference_delays })
      return slept
    end
    -- 0.4 at 0.001, then 0.8 would end at 1.202: give up
    assert.same({ 0.4 }, run(false))
    local ref = run(true)
    assert.is_true(#ref >= 4, #ref)
    assert.equal(0.4, ref[1])
    for i = 2, #ref do assert.is_true(ref[i] < 0.4) end
  end)

  it("uses the time of the first attempt as the clone's start", function()
    local w = world()
    w.now = 100
    local p = backoff.constant { delay = 0.125, max_actual_duration = 1,
      clock = w.clock }
    backoff.retry(p, w.fn(function(n)
      if n < 3 then return 0.25, nil, "x" end
      return 0, "done"
    end), { sleep = w.sleep })
    assert.same({ 100, 100.375, 100.75 },
      { w.log[1][4], w.log[3][4], w.log[5][4] })
    -- a clone started at the first failure (100.25) would run to 101.125
    w.now = 100
    local r = pack(backoff.retry(p, w.fn(function()
      return 0.25, nil, "x" end), { sleep = w.sleep }))
    assert.equal("max_actual_duration", r[3])
    assert.is_true(w.now <= 101)
  end)
end)

describe("backoff.retry's default sleep inside nginx", function()
  local saved
  before_each(function() saved = rawget(_G, "ngx") end)
  after_each(function() rawset(_G, "ngx", saved) end)

  local function fake_ngx()
    local slept = {}
    rawset(_G, "ngx", {
      sleep = function(d) slept[#slept + 1] = d end,
      get_phase = function() return "content" end,
    })
    return slept
  end

  it("sleeps 1 ms for a positive delay under 1 ms", function()
    local slept = fake_ngx()
    local r = backoff.retry(backoff.constant { delay = 0.0004,
      max_attempts = 10 },
      function(n) return n == 3 end)
    assert.is_true(r)
    assert.same({ 0.001, 0.001 }, slept)
  end)

  it("does not call ngx.sleep(0) for a zero delay", function()
    local slept = fake_ngx()
    local r = backoff.retry(backoff.constant { delay = 0, max_attempts = 10 },
      function(n) return n == 4 end)
    assert.is_true(r)
    assert.same({}, slept)
  end)

  it("sleeps other delays as they are", function()
    local slept = fake_ngx()
    backoff.retry(backoff.exponential { initial_delay = 0.0005,
      max_attempts = 4 }, function() return nil, "x" end)
    assert.same({ 0.001, 0.001, 0.002 }, slept)
  end)

  it("leaves a sleep given in ropts alone", function()
    fake_ngx()
    local got = {}
    backoff.retry(backoff.constant { delay = 0, max_attempts = 2 },
      function() return nil end,
      { sleep = function(d) got[#got + 1] = d end })
    assert.same({ 0 }, got)
  end)
end)

describe("backoff.retry never loses a success", function()
  it("reads no clock after a successful attempt", function()
    local dead = false
    local clock = function()
      if dead then error("clock died", 0) end
      return 0
    end
    for _, opts in ipairs {
      { initial_delay = 0, clock = clock, max_attempts = 5 },
      { initial_delay = 0, clock = clock, max_actual_duration = 5,
        adjust_timeout_factor = 0.5, min_adjust_timeout = 0.1 },
    } do
      dead = false
      local p = backoff.exponential(opts)
      assert.same({ "done", 1 }, { backoff.retry(p, function(n)
        dead = true
        return "done", n
      end) })
      dead = false
      assert.same({ "done", 3 }, { backoff.retry(p, function(n)
        if n < 3 then return nil, "again" end
        dead = true
        return "done", n
      end, { sleep = function() end }) })
    end
  end)
end)

describe("backoff.retry's retry_on", function()
  for _, answer in ipairs { false, "nil", "none" } do
    it("stops on a falsy answer (" .. tostring(answer) .. ")", function()
      local r = pack(backoff.retry(backoff.constant { delay = 0,
        max_attempts = 10 },
        function() return nil, "e" end, { sleep = function() end,
          retry_on = function()
            if answer == "none" then return end
            if answer == "nil" then return nil end
            return answer
          end }))
      assert.same({ n = 3, nil, "e", "retry_on" }, r)
    end)
  end

  it("goes on for any true value, 0 included", function()
    local r = backoff.retry(backoff.constant { delay = 0, max_attempts = 10 },
      function(n) return n == 3 end,
      { sleep = function() end, retry_on = function() return 0 end })
    assert.is_true(r)
  end)
end)

describe("backoff.retry when fn yields outside a coroutine", function()
  local function yields_once(a)
    if a == 1 then coroutine.yield("x") end
    return "ok", a
  end

  it("raises, as any error of fn", function()
    local co, main = coroutine.running()
    assert.is_true(co == nil or main == true)     -- the main thread
    assert.error_matches(function()
      backoff.retry(backoff.constant { delay = 0, max_attempts = 3 },
                    yields_once, { sleep = function() end })
    end, "yield")
  end)

  it("counts it as a failure and retries with retry_raised, on every Lua",
    function()
      local errs = {}
      local r, n = backoff.retry(backoff.constant { delay = 0,
        max_attempts = 3 }, yields_once, { sleep = function() end,
        retry_raised = true,
        on_retry = function(e) errs[#errs + 1] = e end })
      assert.same({ "ok", 2 }, { r, n })
      assert.equal(1, #errs)
      assert.matches("attempt to yield", errs[1])
    end)
end)

describe("backoff.retry's hints (ropts.retry_after)", function()
  it("asks for a hint after each failure and sleeps at least it",
    function()
      local asked, slept = {}, {}
      local r = backoff.retry(backoff.constant { delay = 0.1,
        max_attempts = 5 }, function(n) if n < 3 then return nil,
          "e" .. n end return n end,
        { sleep = function(d) slept[#slept + 1] = d end,
          retry_after = function(err, attempt)
            asked[#asked + 1] = { err, attempt }
            if attempt == 1 then return 2 end
          end })
      assert.equal(3, r)
      assert.same({ { "e1", 1 }, { "e2", 2 } }, asked)
      assert.same({ 2, 0.1 }, slept)
    end)

  it("gives up with reason retry_after beyond max_hint", function()
    local r = pack(backoff.retry(backoff.constant { delay = 0.1,
      max_hint = 5, max_attempts = 5 }, function() return nil, "busy" end,
      { sleep = function() end, retry_after = function() return 6 end }))
    assert.same({ n = 3, nil, "busy", "retry_after" }, r)
  end)

  it("gives up when the hint reaches the deadline", function()
    local w = world()
    local r = pack(backoff.retry(backoff.constant { delay = 0.1,
      max_actual_duration = 3, clock = w.clock },
      function() return nil, "busy" end,
      { sleep = w.sleep, retry_after = function() return 3 end }))
    assert.same({ n = 3, nil, "busy", "max_actual_duration" }, r)
    assert.same({}, w.log)
  end)
end)

describe("backoff.retry's bad hints", function()
  it("raises, naming ropts.retry_after", function()
    for _, bad in ipairs { -1, 0 / 0, math.huge, "5", true } do
      assert.error_matches(function()
        backoff.retry(backoff.constant { delay = 0, max_attempts = 10 },
          function() return nil, "x" end,
          { sleep = function() end, retry_after = function() return bad end })
      end, "ropts.retry_after must return nil or a finite number >= 0",
      nil, true)
    end
  end)

  it("takes false as no hint", function()
    local slept = {}
    backoff.retry(backoff.constant { delay = 0.5, max_attempts = 2 },
      function() return nil, "x" end,
      { sleep = function(d) slept[#slept + 1] = d end,
        retry_after = function() return false end })
    assert.same({ 0.5 }, slept)
  end)
end)

describe("backoff.ffi", function()
  it("installs once: a second call does nothing", function()
    local methods = getmetatable(backoff.constant { delay = 1 }).__index
    local failure = methods.failure
    assert.is_false(require("backoff.ffi")(methods))
    assert.equal(failure, methods.failure)
  end)
end)

describe("backoff.retry's budget (ropts.budget)", function()
  -- a Lua stand-in for backoff.budget, logging each call
  local function fake_budget(tokens, cost, with_cost)
    local bud = { tokens = tokens, log = {} }
    function bud:withdraw(c)
      self.log[#self.log + 1] = { "withdraw", c }
      c = c or cost
      if self.tokens < c then return false end
      self.tokens = self.tokens - c
      return true
    end
    function bud:deposit(n)
      self.log[#self.log + 1] = { "deposit", n }
      self.tokens = self.tokens + (n or 1)
    end
    if with_cost then bud.cost = function() return cost end end
    return bud
  end

  local function flaky(fails)
    return function(n)
      if n <= fails then return nil, "e" .. n end
      return "ok", n
    end
  end
  local nosleep = function() end

  it("withdraws before each retry and deposits the cost on success",
    function()
      local bud = fake_budget(100, 5, true)
      local r, n = backoff.retry(backoff.constant { delay = 0,
        max_attempts = 10 }, flaky(3),
        { sleep = nosleep, budget = bud })
      assert.same({ "ok", 4 }, { r, n })
      assert.same({ { "withdraw", 5 }, { "withdraw", 5 }, { "withdraw", 5 },
                    { "deposit", 5 } }, bud.log)
      assert.equal(90, bud.tokens)
    end)

  it("deposits the refund (no argument) on a first-try success",
    function()
      local bud = fake_budget(100, 5, true)
      backoff.retry(backoff.constant { delay = 0, max_attempts = 10 }, flaky(0),
        { budget = bud })
      assert.same({ { "deposit" } }, bud.log)
    end)

  it("uses the budget's own cost when it has no cost method", function()
    local bud = fake_budget(100, 5, false)
    backoff.retry(backoff.constant { delay = 0, max_attempts = 10 }, flaky(1),
      { sleep = nosleep, budget = bud })
    assert.same({ { "withdraw" }, { "deposit" } }, bud.log)
  end)

  it("gives up with reason budget when the tokens run out, unslept",
    function()
      local bud = fake_budget(12, 5, true)
      local slept = {}
      local r = pack(backoff.retry(backoff.constant { delay = 1,
        max_attempts = 10 },
        flaky(10), { budget = bud,
          sleep = function(d) slept[#slept + 1] = d end }))
      assert.same({ n = 3, nil, "e3", "budget" }, r)
      assert.same({ 1, 1 }, slept)
      assert.equal(2, bud.tokens)
    end)

  it("does not withdraw when the policy gives up", function()
    local bud = fake_budget(100, 5, true)
    local r = pack(backoff.retry(backoff.constant { delay = 0,
      max_attempts = 2 }, flaky(10), { sleep = nosleep, budget = bud }))
    assert.equal("max_attempts", r[3])
    assert.equal(1, #bud.log)
  end)

  it("pays back a retry the deadline cancelled after the sleep", function()
    local w = world()
    local bud = fake_budget(100, 5, true)
    local r = pack(backoff.retry(backoff.constant { delay = 0.5,
      max_actual_duration = 1, clock = w.clock },
      function() return nil, "e" end,
      { budget = bud, sleep = function(d) w.now = w.now + d + 1 end }))
    assert.equal("max_actual_duration", r[3])
    assert.same({ { "withdraw", 5 }, { "deposit", 5 } }, bud.log)
  end)

  it("works with the token bucket", function()
    local bud = backoff.budget { capacity = 10, cost = 5, refund = 1 }
    local r = pack(backoff.retry(backoff.constant { delay = 0,
      max_attempts = 10 }, flaky(10),
      { sleep = nosleep, budget = bud }))
    assert.same({ n = 3, nil, "e3", "budget" }, r)
    assert.equal(0, bud:tokens())
    backoff.retry(backoff.constant { delay = 0, max_attempts = 10 }, flaky(0),
      { budget = bud })
    assert.equal(1, bud:tokens())
  end)
end)

describe("backoff.retry's arguments", function()
  local p = backoff.constant { delay = 0, max_attempts = 10 }
  local ok = function() return true end

  local function raises_here(f, text)
    local good, err = pcall(f)
    assert.is_false(good)
    assert.equal("string", type(err))
    assert.matches(text, err, 1, true)
    -- the position is the caller's line, not backoff.lua
    assert.equal(1, err:find(HERE, 1, true), err)
  end

  it("checks every ropts key and its type, at the caller", function()
    local cases = {
      { { sleep = 1 }, "option 'sleep' must be a function (got 1)" },
      { { retry_on = true }, "option 'retry_on' must be a function" },
      { { on_retry = "x" }, "option 'on_retry' must be a function" },
      { { retry_after = 2 }, "option 'retry_after' must be a function" },
      { { budget = 5 }, "option 'budget' must be a budget" },
      { { min_attempt_time = "1" },
        "option 'min_attempt_time' must be a finite number >= 0 (got '1')" },
      { { min_attempt_time = -1 },
        "option 'min_attempt_time' must be a finite number >= 0" },
      { { min_attempt_time = 0 / 0 },     -- "nan" on every libc
        "option 'min_attempt_time' must be a finite number >= 0 (got nan)" },
      { { min_attempt_time = math.huge },
        "option 'min_attempt_time' must be a finite number >= 0" },
      { { reference_delays = 1 },
        "option 'reference_delays' must be a boolean" },
      { { slep = print }, "unknown option 'slep'" },
      { { [1] = print }, "unknown option 1" },
    }
    for _, c in ipairs(cases) do
      raises_here(function() backoff.retry(p, ok, c[1]) end, c[2])
      raises_here(function() p:retry(ok, c[1]) end, c[2])
    end
    raises_here(function() backoff.retry(p, ok, 5) end,
      "backoff.retry: options must be a table (got number)")
  end)

  it("accepts every ropts key", function()
    assert.is_true(backoff.retry(p, ok, { sleep = print,
      retry_on = print, on_retry = print, retry_after = print,
      budget = { withdraw = ok, deposit = ok }, retry_cost = print,
      min_attempt_time = 0.5, reference_delays = true }))
  end)

  it("points errors about the policy or fn at the caller", function()
    raises_here(function()
      backoff.retry({ strategy = "constant", delay = -1 }, ok)
    end, "option 'delay' must be a finite number >= 0")
    raises_here(function()
      backoff.retry({ strategy = "nope" }, ok)
    end, "unknown strategy 'nope'")
    raises_here(function() backoff.retry({ delay = 1 }, ok) end,
      "policy table needs a 'strategy' field")
    raises_here(function() backoff.retry(42, ok) end,
      "argument 'policy' must be a backoff object")
    raises_here(function() backoff.retry(p, 42) end,
      "argument 'fn' must be a function (got number)")
    raises_here(function() p:retry(nil) end,
      "argument 'fn' must be a function (got nil)")
    raises_here(function() p.retry({}, ok) end,
      "bad argument #1 to 'retry'")
  end)

  it("builds a policy table at every call, so a bad one always raises",
    function()
      local bad = { strategy = "constant", delay = 1, max_attemps = 3 }
      for _ = 1, 3 do
        raises_here(function() backoff.retry(bad, ok) end,
          "unknown option 'max_attemps'")
      end
    end)

  it("takes a callable object as fn", function()
    local f = setmetatable({}, { __call = function(_, n)
      if n < 2 then return nil, "x" end
      return "called", n
    end })
    assert.same({ "called", 2 }, { backoff.retry(p, f,
      { sleep = function() end }) })
    assert.same({ "called", 2 }, { p:retry(f, { sleep = function() end }) })
  end)
end)
