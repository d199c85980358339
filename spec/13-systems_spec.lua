-- The systems users port from, by name: each reproduces its reference's
-- sequence for the same draws (the random option), with the reference's
-- own parameters, defaults and stop rules.  The expected numbers are the
-- references' documented examples, or their arithmetic run by hand.
local backoff = require "backoff"

local MAXD = 1 - 2 ^ -53          -- the largest double below 1

-- draws: a number (always that) or a list (one per call, then error)
local function draws(d)
  if type(d) == "number" then return function() return d end end
  local i = 0
  return function()
    i = i + 1
    return assert(d[i], "more draws than recorded")
  end
end

-- n failures at timestamps ts[i] (default 0): delays in ms, "stop" for
-- a give-up
local function run(b, n, ts)
  local out = {}
  for i = 1, n do
    local d = b:failure(ts and ts[i] or 0)
    out[i] = d and d * 1000 or "stop"
  end
  return out
end

-- each expected value within tol ms (default: exact but for the float
-- error of a seconds <-> ms conversion)
local function near(expected, actual, tol)
  assert.equal(#expected, #actual)
  for i = 1, #expected do
    if type(expected[i]) == "string" then
      assert.equal(expected[i], actual[i], "at " .. i)
    else
      assert.is_number(actual[i], "at " .. i)
      assert.is_true(math.abs(expected[i] - actual[i]) <= (tol or 1e-6),
        ("at %d: expected %.9g, got %.9g"):format(i, expected[i], actual[i]))
    end
  end
end

describe("google (Google's ExponentialBackOff)", function()
  -- the javadoc's table: defaults 0.5 s, 0.5, 1.5, 60 s; the interval is
  -- whole milliseconds, truncated at every step (1687, 2530, ...)
  local TABLE = {
    [0] = { 250, 375, 562, 843, 1265, 1897, 2846, 4269, 6403, 9605, 14407,
            21611, 30000 },
    [0.5] = { 500, 750, 1125, 1687, 2530, 3795, 5692, 8538, 12807, 19210,
              28815, 43222, 60000 },
    [MAXD] = { 751, 1126, 1688, 2531, 3795, 5693, 8539, 12807, 19211,
               28815, 43223, 64833, 90001 },
  }

  it("reproduces the javadoc table for draws 0, 0.5 and the largest "
     .. "below 1", function()
    for u, expected in pairs(TABLE) do
      near(expected, run(backoff.google { random = draws(u), start = 0 }, 13))
    end
  end)

  it("takes a draw of exactly 1 (cur * 1.5 + 1 ms)", function()
    local b = backoff.google { random = draws(1), start = 0 }
    near({ 751, 1126, 1688, 2531, 3796 }, run(b, 5))
  end)

  it("has Google's defaults and getters", function()
    local b = backoff.google { start = 0, seed = 1 }
    local c = b:config()
    assert.same({ 0.5, 0.5, 1.5, 60, 900 }, { c.initial_interval,
      c.randomization_factor, c.multiplier, c.max_interval,
      c.max_elapsed_time })
    assert.equal(0.5, b:current_interval())
    b:failure(1)
    assert.equal(0.75, b:current_interval())
    assert.equal(1, b:elapsed(1))
    b:reset(5)                             -- Java's reset()
    assert.equal(0.5, b:current_interval())
    assert.equal(0, b:elapsed(5))
  end)

  it("stops once the elapsed time is over max_elapsed_time, strictly, "
     .. "in whole milliseconds, before drawing", function()
    local calls = 0
    local b = backoff.google { max_elapsed_time = 2, start = 0,
      random = function() calls = calls + 1 return 0.5 end }
    near({ 500, 750, 1125, "stop", "stop" },
         run(b, 5, { 0, 1, 2.0009, 2.001, 1 }))
    assert.equal(3, calls)                 -- no draw for a STOP
    assert.equal(1.687, b:current_interval())   -- unchanged by STOPs
  end)

  it("gives Java's validation errors by name", function()
    for opts, text in pairs {
      [{ initial_interval = 0 }] = "option 'initial_interval' must be a "
        .. "finite number > 0",
      [{ randomization_factor = 1 }] = "option 'randomization_factor' must "
        .. "be a number in [0, 1)",
      [{ multiplier = 0.5 }] = "option 'multiplier' must be a finite "
        .. "number >= 1",
      [{ initial_interval = 2, max_interval = 1 }] = "option "
        .. "'initial_interval' must be <= max_interval (got 2 > 1)",
      [{ max_interval = 0.25 }] = "option 'max_interval' must be >= "
        .. "initial_interval (got 0.25 < 0.5)",
      [{ max_elapsed_time = 0 }] = "option 'max_elapsed_time' must be a "
        .. "finite number > 0",
      [{ max_delay = 1 }] = "unknown option 'max_delay'",
    } do
      assert.error_matches(function() backoff.google(opts) end,
        "backoff.google: " .. text, nil, true)
    end
  end)
end)

describe("cenkalti (cenkalti/backoff v4)", function()
  it("keeps its interval in nanoseconds: no millisecond truncation",
    function()
      near({ 250, 375, 562.5, 843.75, 1265.625, 1898.4375, 2847.65625,
             4271.484375, 6407.226562, 9610.839843, 14416.259765,
             21624.389647, 30000, 30000 },
           run(backoff.cenkalti { random = draws(0), start = 0 }, 14), 1e-5)
    end)

  it("stops when elapsed + next > max_elapsed_time, after the draw; the "
     .. "interval advances and a later failure may go on", function()
    local b = backoff.cenkalti { max_elapsed_time = 2, start = 0,
      random = draws { 0.5, 0.5, 0.5, 0 } }
    near({ 500, 750, "stop" }, run(b, 3, { 0, 0.6, 1.5 }))
    assert.equal(1.6875, b:current_interval())
    -- u = 0 at 1.1 s: 1.1 + 0.84375 <= 2 -> goes on, as Go does
    near({ 843.75 }, { b:failure(1.1) * 1000 })
  end)

  it("draws even with randomization_factor 0 (and returns the interval)",
    function()
      local calls = 0
      local b = backoff.cenkalti { randomization_factor = 0,
        initial_interval = 1, multiplier = 2, max_interval = 10,
        random = function() calls = calls + 1 return MAXD end }
      near({ 1000, 2000, 4000, 8000, 10000, 10000 }, run(b, 6))
      assert.equal(6, calls)
    end)

  it("max_retries is WithMaxRetries: n delays, then stop without a draw",
    function()
      local calls = 0
      local b = backoff.cenkalti { max_retries = 2, max_elapsed_time = 0,
        random = function() calls = calls + 1 return 0.5 end }
      near({ 500, 750, "stop", "stop" }, run(b, 4))
      assert.equal(2, calls)
    end)
end)

describe("eventsauce (EventSauce BackOff)", function()
  it("reproduces the README's exponential, fibonacci and linear", function()
    near({ 100, 200, 400, 800, 1600, 2500, 2500 },
      run(backoff.eventsauce { initial_delay = 0.1, max_tries = 15 }, 7))
    near({ 100, 100, 200, 300, 500, 800, 1300, 2100, 2500 },
      run(backoff.eventsauce { backoff_type = "fibonacci",
        initial_delay = 0.1, max_tries = 25 }, 9))
    near({ 100, 200, 300, 400 },
      run(backoff.eventsauce { backoff_type = "linear", initial_delay = 0.1,
        max_tries = 25 }, 4))
  end)

  it("jitters after the cap: full, half, scattered (may exceed it), and "
     .. "only above a threshold", function()
    local function es(j, u, more)
      local o = { initial_delay = 0.1, max_tries = 15, jitter = j,
                  random = draws(u) }
      for k, v in pairs(more or {}) do o[k] = v end
      return run(backoff.eventsauce(o), 7)
    end
    near({ 50, 100, 200, 400, 800, 1250, 1250 }, es("full", 0.5))
    near({ 75, 150, 300, 600, 1200, 1875, 1875 }, es("half", 0.5))
    near({ 150, 300, 600, 1200, 2400, 3750, 3750 },
         es("scattered", MAXD, { range = 0.5 }), 1e-3)
    near({ 100, 200, 325, 525, 925, 1375, 1375 },
         es("full", 0.5, { jitter_threshold = 0.25 }))
    -- JitterAfterThreshold's inner jitter is FullJitter by default
    near({ 100, 200, 325, 525 }, run(backoff.eventsauce {
      initial_delay = 0.1, max_tries = 15, jitter_threshold = 0.25,
      random = draws(0.5) }, 4))
  end)

  it("max_tries n sleeps n times and gives up at try n + 1; -1 is no "
     .. "limit, 0 no retry", function()
    near({ 100, 200, 400, "stop" },
      run(backoff.eventsauce { initial_delay = 0.1, max_tries = 3 }, 4))
    near({ "stop" },
      run(backoff.eventsauce { initial_delay = 0.1, max_tries = 0 }, 1))
    local b = backoff.eventsauce { initial_delay = 0.1, max_tries = -1 }
    for _ = 1, 100 do assert.is_number(b:failure(0)) end
    near({ 0, 0, 0, "stop" },
      run(backoff.eventsauce { backoff_type = "no_waiting", max_tries = 3 },
          4))
    near({ "stop" },
      run(backoff.eventsauce { backoff_type = "immediately_failing" }, 1))
  end)

  -- max_tries of 2^63 and more were converted to 64-bit integers out of
  -- range: 2^64 gave up at once, 2^63 showed -2^63 in config()
  it("a huge max_tries saturates, and config() rebuilds it", function()
    for _, v in ipairs { 2 ^ 53, 2 ^ 63, 2 ^ 64, 1e300 } do
      local b = backoff.eventsauce { initial_delay = 0.1, max_tries = v,
                                     max_delay = 1 }
      near({ 100, 200, 400 }, run(b, 3))
      local c = b:config()
      assert.is_true(c.max_tries >= 2 ^ 53, tostring(c.max_tries))
      local r = backoff.new("eventsauce", c)
      assert.equal(c.max_tries, r:config().max_tries)
      near({ 100, 200, 400 }, run(r, 3))
    end
  end)

  it("refuses what EventSauce would turn into nonsense, by name", function()
    for opts, text in pairs {
      [{ initial_delay = 0.1 }] = "missing required option 'max_tries'",
      [{ max_tries = 2 }] = "missing required option 'initial_delay'",
      [{ initial_delay = 0.1, max_tries = -2 }] = "option 'max_tries' must "
        .. "be an integer >= -1",
      [{ initial_delay = 0.1, max_tries = 1.5 }] = "option 'max_tries'",
      [{ initial_delay = 0.1, max_tries = 1, jitter = "scattered" }] =
        "option 'jitter' needs option 'range'",
      [{ initial_delay = 0.1, max_tries = 1, jitter = "proportional" }] =
        "option 'jitter' must be 'none', 'full', 'half' or 'scattered'",
      [{ initial_delay = 0.1, max_tries = 1, range = 2 }] = "option 'range'",
      [{ initial_delay = 0.1, max_tries = 1, backoff_type = "constant" }] =
        "option 'backoff_type' must be 'exponential', 'fibonacci'",
    } do
      assert.error_matches(function() backoff.eventsauce(opts) end,
        "backoff.eventsauce: " .. text, nil, true)
    end
  end)
end)

describe("polly (Polly v8)", function()
  it("has RetryStrategyOptions' defaults: constant 2 s, three retries",
    function()
      near({ 2000, 2000, 2000, "stop" }, run(backoff.polly {}, 4))
    end)

  it("counts attempts from 0: linear (a+1)*delay, exponential 2^a*delay, "
     .. "MaxDelay after", function()
    near({ 2000, 4000, 6000 }, run(backoff.polly { backoff_type = "linear" },
      3))
    near({ 2000, 4000, 8000, 16000, 30000, 30000 },
      run(backoff.polly { backoff_type = "exponential", max_delay = 30,
        max_retry_attempts = 6 }, 6))
  end)

  it("jitters constant and linear by 0.75 + 0.5u (Polly's own tests)",
    function()
      for u, ms in pairs { [0] = 1500, [0.25] = 1750, [0.5] = 2000,
                           [0.75] = 2250, [1] = 2500 } do
        near({ ms }, run(backoff.polly { use_jitter = true,
          random = draws(u) }, 1))
      end
      near({ 1000, 2000, 3000 }, run(backoff.polly { backoff_type = "linear",
        delay = 1, use_jitter = true, random = draws(0.5) }, 3))
    end)

  it("uses DecorrelatedJitterBackoffV2 for exponential with jitter",
    function()
      near({ 1794.8098, 2186.0070, 4071.4959, 8091.9588, 16167.2632,
             32327.3256 },
           run(backoff.polly { backoff_type = "exponential",
             use_jitter = true, max_retry_attempts = 6,
             random = draws(0.5) }, 6), 1e-3)
      near({ 0, 2754.3645, 2920.1346 },
           run(backoff.polly { backoff_type = "exponential",
             use_jitter = true, random = draws(0) }, 3), 1e-3)
    end)

  it("makes no draw without jitter or for a delay of 0", function()
    local calls = 0
    local count = function() calls = calls + 1 return 0.5 end
    run(backoff.polly { random = count }, 3)
    run(backoff.polly { use_jitter = true, delay = 0, random = count }, 3)
    assert.equal(0, calls)
  end)
end)

describe("decorrelated_v2 (Polly.Contrib's DecorrelatedJitterBackoffV2)",
  function()
    it("reproduces the contrib's arithmetic", function()
      near({ 897.4049, 1093.0035, 2035.7479, 4045.9794, 8083.6316 },
        run(backoff.decorrelated_v2 { median_first_retry_delay = 1,
          random = draws(0.5) }, 5), 1e-3)
    end)

    it("fast_first: a first retry at 0 that counts, the next from t = 1 + u",
      function()
        near({ 0, 1990.4084, 2035.7479, 4045.9794, "stop" },
          run(backoff.decorrelated_v2 { median_first_retry_delay = 1,
            fast_first = true, max_retries = 4, random = draws(0.5) }, 5),
          1e-3)
      end)

    it("never overflows: the largest delay once 2^t does", function()
      local b = backoff.decorrelated_v2 { median_first_retry_delay = 1,
        random = draws(0.5) }
      for _ = 1, 1100 do
        local d = b:failure(0)
        assert.is_true(d >= 0 and d < math.huge)
      end
    end)
  end)

describe("Polly.Contrib's other backoffs, as options", function()
  it("ExponentialBackoff(100 ms, 4, fastFirst: true)", function()
    near({ 0, 100, 200, 400, "stop" }, run(backoff.exponential {
      initial_delay = 0.1, fast_first = true, max_retries = 4 }, 5))
  end)

  it("LinearBackoff(100 ms, factor 0.5): initial + factor * initial * i",
    function()
      near({ 100, 150, 200, 250 }, run(backoff.linear { initial_delay = 0.1,
        delay_increment = 0.05 }, 4))
    end)

  it("AwsDecorrelatedJitterBackoff(10 ms, 100 ms): U(min, min(max, 3 prev))",
    function()
      local function aws(u, fast)
        return run(backoff.decorrelated { initial_delay = 0.01,
          max_delay = 0.1, cap_then_jitter = true, fast_first = fast,
          random = draws(u) }, 5)
      end
      near({ 20, 35, 55, 55, 55 }, aws(0.5))
      -- no draw when the bounds are equal (a minimum of 0 or = maximum)
      local calls = 0
      local b = backoff.decorrelated { initial_delay = 0, max_delay = 0.1,
        cap_then_jitter = true,
        random = function() calls = calls + 1 return 0.5 end }
      near({ 0, 0, 0 }, run(b, 3))
      assert.equal(0, calls)
      near({ 0, 20, 35, 55, 55 }, aws(0.5, true))
      near({ 10, 10, 10, 10, 10 }, aws(0))
    end)
end)

describe("aws (the AWS article's formulas, as the seed's code states them)",
  function()
    local function aws(j, u)
      return run(backoff.aws { base = 10, cap = 100, jitter = j,
        random = draws(u) }, 6)
    end

    it("full: U(0, min(cap, base * 2^n)), n from 0", function()
      near({ 5000, 10000, 20000, 40000, 50000, 50000 }, aws("full", 0.5))
    end)

    it("equal: temp / 2 + U(0, temp / 2)", function()
      near({ 7500, 15000, 30000, 60000, 75000, 75000 }, aws("equal", 0.5))
      near({ 5000, 10000, 20000, 40000, 50000, 50000 }, aws("equal", 0))
    end)

    it("decorrelated: min(cap, U(base, 3 * sleep)), sleep from base",
      function()
        near({ 20000, 35000, 57500, 91250, 100000, 100000 },
          aws("decorrelated", 0.5))
      end)
  end)

describe("the random option", function()
  it("is called once per draw: the initial timeout, then per failure the "
     .. "strategy's, the jitter's, the timeout's", function()
    local log = {}
    local b = backoff.retry_timeouts { start = 0,
      random = function() log[#log + 1] = "draw" return 0.5 end }
    assert.equal(1, #log)                 -- the initial timeout
    b:failure(1)
    assert.equal(3, #log)                 -- jitter, then timeout jitter
    local d = backoff.decorrelated { initial_delay = 1, max_delay = 10,
      random = function() log[#log + 1] = "dec" return 0 end }
    d:failure(0)
    d:failure(0)
    assert.equal(5, #log)
  end)

  it("gives the same numbers as the draws say, on every Lua", function()
    local b = backoff.exponential { initial_delay = 1, jitter = "full",
      random = draws { 0, 0.25, 1 } }
    assert.same({ 0, 0.5, 4 }, { b:failure(0), b:failure(0), b:failure(0) })
  end)

  it("refuses a draw outside [0, 1], NaN or a non-number by name, and "
     .. "leaves the object as it was", function()
    for _, bad in ipairs { -0.1, 1.5, 0 / 0, math.huge, "0.5", {}, true } do
      local give = 0.5
      local b = backoff.exponential { initial_delay = 1, jitter = "full",
        random = function() return give end }
      local twin = backoff.exponential { initial_delay = 1, jitter = "full",
        random = function() return 0.5 end }
      b:failure(0)
      twin:failure(0)
      give = bad
      assert.error_matches(function() b:failure(0) end,
        "backoff.exponential:failure: option 'random' must return a number "
        .. "in [0, 1]", nil, true)
      assert.equal(1, b:attempts())
      give = 0.5
      assert.equal(twin:failure(0), b:failure(0))
    end
  end)

  it("passes on an error the function raises, object unchanged", function()
    local fail = false
    local b = backoff.exponential { initial_delay = 1, jitter = "equal",
      random = function() if fail then error("boom") end return 0 end }
    b:failure(0)
    fail = true
    assert.error_matches(function() b:failure(0) end, "boom")
    assert.equal(1, b:attempts())
  end)

  it("must be a function; a construction's draw is checked too", function()
    assert.error_matches(function()
      backoff.constant { delay = 1, random = 0.5 } end,
      "option 'random' must be a function returning numbers in [0, 1]",
      nil, true)
    assert.error_matches(function()
      backoff.retry_timeouts { random = function() return 7 end } end,
      "backoff.retry_timeouts: option 'random' must return", nil, true)
  end)

  it("is shared by clones and shown by config()", function()
    local n = 0
    local f = function() n = n + 1 return 0.5 end
    local b = backoff.google { random = f }
    local c = b:clone()
    c:failure(0)
    assert.equal(1, n)
    assert.equal(f, b:config().random)
    assert.equal(f, backoff.new("google", b:config()):config().random)
  end)
end)

describe("jitter at the cap", function()
  -- 10,000 clients, each its own seed, at the cap
  local function at_cap(strategy, opts, failures)
    local seen, distinct, lo, hi = {}, 0, math.huge, -math.huge
    for seed = 1, 10000 do
      local o = { seed = seed }
      for k, v in pairs(opts) do o[k] = v end
      local b = backoff.new(strategy, o)
      local d
      for _ = 1, failures do d = b:failure(0) end
      if not seen[d] then seen[d], distinct = true, distinct + 1 end
      lo, hi = math.min(lo, d), math.max(hi, d)
    end
    return distinct, lo, hi
  end

  it("stays spread within [min_delay, max_delay] for every kind", function()
    for _, case in ipairs {
      { "exponential", { initial_delay = 0.5, exponent_base = 1.5,
        max_delay = 60, jitter_factor = 0.5 } },
      { "exponential", { initial_delay = 1, max_delay = 60, min_delay = 5,
        jitter = "full" } },
      { "exponential", { initial_delay = 1, max_delay = 60,
        jitter = "equal" } },
      { "linear", { initial_delay = 10, max_delay = 60,
        jitter_factor = 0.1 } },
      { "fibonacci", { initial_delay = 10, max_delay = 60,
        jitter_factor = 0.2 } },
      { "limd", { initial_delay = 50, delay_increment_on_failure = 50,
        delay_multiple_on_success = 0.5, max_delay = 60,
        jitter_factor = 0.3 } },
      { "decorrelated", { initial_delay = 0.01, max_delay = 0.1,
        cap_then_jitter = true } },
    } do
      local o = case[2]
      local distinct, lo, hi = at_cap(case[1], o, 14)
      assert.is_true(distinct >= 9900, case[1] .. ": " .. distinct)
      assert.is_true(lo >= (o.min_delay or 0) and hi <= o.max_delay,
        case[1] .. ": " .. lo .. " .. " .. hi)
    end
  end)

  it("keeps the reference's band below max / (1 + f)", function()
    local b = backoff.constant { delay = 10, jitter_factor = 0.25,
      max_delay = 100, random = draws { 0, MAXD } }
    assert.equal(7.5, b:failure(0))
    assert.is_true(math.abs(b:failure(0) - 12.5) < 1e-9)
  end)

  it("spreads over max * [1 - f, 1] above it, not on max_delay", function()
    local b = backoff.exponential { initial_delay = 60, max_delay = 60,
      exponent_base = 3, jitter_factor = 0.5, random = draws { 0, 0.5, 1 } }
    assert.same({ 30, 45, 60 }, { b:failure(0), b:failure(0), b:failure(0) })
  end)

  it("cap_then_jitter: the references' order, up to max * (1 + f)",
    function()
      local b = backoff.exponential { initial_delay = 60, max_delay = 60,
        exponent_base = 3, jitter_factor = 0.5, cap_then_jitter = true,
        random = draws { 0, 0.5, 1 } }
      assert.same({ 30, 60, 90 }, { b:failure(0), b:failure(0),
                                    b:failure(0) })
    end)

  it("the AWS formula of decorrelated still pins at the cap (the seed's "
     .. "code)", function()
    local distinct = at_cap("decorrelated", { initial_delay = 0.01,
      max_delay = 0.1 }, 14)
    assert.is_true(distinct < 9000)
  end)
end)

describe("options shared by the ports", function()
  it("max_retries n gives n delays; with max_attempts it is an error",
    function()
      near({ 1000, 1000, "stop" },
        run(backoff.constant { delay = 1, max_retries = 2 }, 3))
      assert.equal(3, backoff.constant { delay = 1, max_retries = 2 }
        :config().max_attempts)
      assert.error_matches(function()
        backoff.constant { delay = 1, max_retries = 2, max_attempts = 3 }
      end, "options 'max_retries' and 'max_attempts' cannot be given "
        .. "together", nil, true)
    end)

  it("fast_first is refused where a first zero has no meaning", function()
    assert.error_matches(function()
      backoff.limd { initial_delay = 1, delay_increment_on_failure = 1,
        delay_multiple_on_success = 0.5, fast_first = true }
    end, "backoff.limd: unknown option 'fast_first'", nil, true)
  end)
end)

describe("the systems under backoff.retry", function()
  it("runs every system as a policy, each counting retries its way",
    function()
      local sleeps = {}
      local sleep = function(d) sleeps[#sleeps + 1] = d end
      for s, opts in pairs {
        google = { max_retries = 2 },
        cenkalti = { max_retries = 2 },
        eventsauce = { initial_delay = 0.1, max_tries = 2 },
        polly = { max_retry_attempts = 2 },
        decorrelated_v2 = { median_first_retry_delay = 1, max_retries = 2 },
        aws = { base = 0.1, cap = 1, max_retries = 2 },
      } do
        local calls = 0
        local r, err, reason = backoff.retry(backoff.new(s, opts),
          function() calls = calls + 1 return nil, "no" end,
          { sleep = sleep })
        assert.is_nil(r)
        assert.equal("no", err)
        assert.equal("max_attempts", reason, s)
        assert.equal(3, calls, s)
      end
    end)

  it("takes a policy's random draws once each, also with timeouts",
    function()
      local taken = 0
      local p = backoff.retry_timeouts { max_actual_duration = 10,
        min_adjust_timeout = 0.01, initial_delay = 0.001,
        random = function() taken = taken + 1 return 0.5 end }
      taken = 0
      local n = 0
      assert.is_number(backoff.retry(p, function(_, t)
        n = n + 1
        if n < 2 then return nil, "x" end
        return t
      end, { sleep = function() end }))
      -- the run's object: its initial timeout; the failure: the delay's
      -- jitter and the timeout's
      assert.equal(3, taken)
    end)
end)
