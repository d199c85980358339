-- The option table (issue 9): aliases decided, not racing; keys matched
-- exactly; options read raw; every error names its option; short quotes.
local backoff = require "backoff"

-- the interpreter running this spec, to start separate processes
local function interpreter()
  if rawget(_G, "jit") then return "luajit" end
  return "lua" .. _VERSION:match("%d+%.%d+")
end

describe("options", function()
  it("fibonacci's initial_delay with initial_delay1/2 is an error naming both",
    function()
      for _, other in ipairs { "initial_delay1", "initial_delay2" } do
        local opts = { initial_delay1 = 1, initial_delay2 = 2 }
        opts.initial_delay = 5
        local ok, err = pcall(backoff.fibonacci, opts)
        assert.is_false(ok)
        assert.matches("options 'initial_delay' and 'initial_delay1' "
          .. "cannot be given together", err, 1, true)
        opts[other == "initial_delay1" and "initial_delay2"
             or "initial_delay1"] = nil
        ok, err = pcall(backoff.fibonacci, opts)
        assert.is_false(ok)
        assert.matches("options 'initial_delay' and '" .. other
          .. "' cannot be given together", err, 1, true)
      end
      -- a bad alias value blames the alias, never the valid option
      local ok, err = pcall(backoff.fibonacci,
        { initial_delay1 = 1, initial_delay2 = 2, initial_delay = -5 })
      assert.is_false(ok)
      assert.matches("option 'initial_delay' must be a finite number >= 0 "
        .. "(got -5)", err, 1, true)
      -- alone, it stands for both
      local b = backoff.fibonacci { initial_delay = 3 }
      assert.equal(3, b:failure(0))
      assert.equal(3, b:failure(0))
      assert.equal(6, b:failure(0))
    end)

  it("gives the same answer in 50 separate processes (table order varies)",
    function()
      local script = [[
        local backoff = require "backoff"
        local ok, err = pcall(backoff.fibonacci,
          { initial_delay1 = 1, initial_delay2 = 2, initial_delay = 5 })
        local ok2, err2 = pcall(backoff.fibonacci,
          { initial_delay1 = 1, initial_delay2 = 2, initial_delay = -5 })
        io.write(tostring(ok), "|", tostring(err), "|", tostring(ok2), "|",
                 tostring(err2))
      ]]
      local lua = interpreter()
      local path = package.path:gsub("'", "")
      local cpath = package.cpath:gsub("'", "")
      local seen = {}
      for _ = 1, 50 do
        local p = io.popen("LUA_PATH='" .. path .. "' LUA_CPATH='" .. cpath
          .. "' " .. lua .. " -e '" .. script:gsub("'", "\"") .. "'")
        local out = p:read("*a")
        p:close()
        seen[out] = true
      end
      local n, only = 0, nil
      for k in pairs(seen) do n, only = n + 1, k end
      assert.equal(1, n)
      assert.matches(
        "^false|.-cannot be given together|false|.-'initial_delay'", only)
    end)

  it("matches keys exactly: a NUL inside a key is an unknown option",
    function()
      local ok, err = pcall(backoff.fibonacci,
        { initial_delay1 = 1, initial_delay2 = 2, ["initial_delay\0x"] = 5 })
      assert.is_false(ok)
      assert.matches("unknown option 'initial_delay\\000x'", err, 1, true)
      ok, err = pcall(backoff.exponential,
        { initial_delay = 1, ["clock\0"] = os.clock })
      assert.is_false(ok)
      assert.matches("unknown option 'clock\\000'", err, 1, true)
    end)

  it("reads options raw: __index is never consulted", function()
    local proxy = setmetatable({ initial_delay = 1 }, { __index = function(_, k)
      if k == "start" or k == "clock" or k == "max_attempts" then
        return "not a number"
      end
    end })
    local b = backoff.exponential(proxy)
    local c = b:config()
    assert.is_nil(c.start)
    assert.is_nil(c.clock)
    assert.equal(0, c.max_attempts)
    assert.equal("number", type(b:elapsed()))
    -- the configuration rebuilds the object
    assert.equal(1, backoff.new(c.strategy, c):failure(0))
  end)

  it("refuses a first delay above the cap, naming what was given",
    function()
      -- the mistake it catches: milliseconds where seconds are meant
      local cases = {
        { "exponential", { initial_delay = 100, max_delay = 10 },
          "option 'initial_delay' must be <= max_delay (got 100 > 10)" },
        { "linear", { initial_delay = 2.5, max_delay = 0.5 },
          "option 'initial_delay' must be <= max_delay (got 2.5 > 0.5)" },
        { "lild", { initial_delay = 3, max_delay = 2,
            delay_increment_on_failure = 1, delay_increment_on_success = -1 },
          "option 'initial_delay' must be <= max_delay (got 3 > 2)" },
        { "mimd", { initial_delay = 3, max_delay = 2,
            delay_multiple_on_failure = 2, delay_multiple_on_success = 0.5 },
          "option 'initial_delay' must be <= max_delay (got 3 > 2)" },
        { "decorrelated", { initial_delay = 100, max_delay = 10 },
          "option 'initial_delay' must be <= max_delay (got 100 > 10)" },
        { "fibonacci", { initial_delay1 = 1, initial_delay2 = 20,
            max_delay = 10 },
          "option 'initial_delay2' must be <= max_delay (got 20 > 10)" },
        { "fibonacci", { initial_delay1 = 20, initial_delay2 = 1,
            max_delay = 10 },
          "option 'initial_delay1' must be <= max_delay (got 20 > 10)" },
        { "fibonacci", { initial_delay = 20, max_delay = 10 },   -- the alias
          "option 'initial_delay' must be <= max_delay (got 20 > 10)" },
        -- only the cap given: it is the one named, against the default
        { "retry_timeouts", { max_delay = 1 },
          "option 'max_delay' must be >= initial_delay (got 1 < 1.41421356" },
        { "google", { initial_interval = 2, max_interval = 1 },
          "option 'initial_interval' must be <= max_interval (got 2 > 1)" },
        { "eventsauce", { initial_delay = 5, max_tries = 3 },  -- cap 2.5
          "option 'initial_delay' must be <= max_delay (got 5 > 2.5)" },
        { "polly", { delay = 3, max_delay = 1 },
          "option 'delay' must be <= max_delay (got 3 > 1)" },
        { "polly", { max_delay = 1 },                         -- delay 2
          "option 'max_delay' must be >= delay (got 1 < 2)" },
        { "decorrelated_v2", { median_first_retry_delay = 2, max_delay = 1 },
          "option 'median_first_retry_delay' must be <= max_delay "
            .. "(got 2 > 1)" },
        { "aws", { base = 2, cap = 1 },
          "option 'base' must be <= cap (got 2 > 1)" },
      }
      for _, case in ipairs(cases) do
        local s, opts, text = case[1], case[2], case[3]
        local ok, err = pcall(backoff.new, s, opts)
        assert.is_false(ok, s)
        assert.matches("backoff." .. s .. ": " .. text, err, 1, true)
        ok, err = pcall(backoff[s], opts)
        assert.is_false(ok, s)
        assert.matches("backoff." .. s .. ": " .. text, err, 1, true)
      end
    end)

  it("accepts a first delay equal to the cap, and where the reference "
     .. "keeps it", function()
    assert.equal(10, backoff.exponential { initial_delay = 10,
      max_delay = 10 }:failure(0))
    assert.equal(5, backoff.fibonacci { initial_delay = 5,
      max_delay = 5 }:failure(0))
    -- constant: Algorithm::Backoff's own t/01-base.t gives delay 3 with
    -- max_delay 2 (spec/04's conformance case)
    assert.equal(2, backoff.constant { delay = 3, max_delay = 2 }:failure(0))
    -- cenkalti: Go returns InitialInterval first whatever MaxInterval is
    local c = backoff.cenkalti { initial_interval = 3, max_interval = 2,
      randomization_factor = 0 }
    assert.equal(3, c:failure(0))
    assert.equal(2, c:failure(0))
    -- EventSauce's no_waiting and immediately_failing ignore initial_delay
    assert.equal(0, backoff.eventsauce { backoff_type = "no_waiting",
      initial_delay = 5, max_tries = 2 }:failure(0))
  end)

  it("names the option of every error, the alias included", function()
    local ok, err = pcall(backoff.fibonacci,
      { initial_delay = -1, initial_delay1 = 0.1 })
    assert.is_false(ok)
    assert.matches("backoff.fibonacci: option 'initial_delay'", err, 1, true)
    assert.not_matches("invalid configuration", err, 1, true)
  end)

  it("quotes at most a short prefix of a bad value", function()
    local huge = string.rep("x", 1024 * 1024)
    for _, opts in ipairs { { delay = huge }, { [huge] = 1, delay = 1 } } do
      local ok, err = pcall(backoff.constant, opts)
      assert.is_false(ok)
      assert.is_true(#err < 200, "message of " .. #err .. " bytes")
      assert.matches("xxx'...", err, 1, true)
    end
  end)

  it("quotes a short prefix in the Lua half's messages too", function()
    local huge = string.rep("x", 1024 * 1024) .. "\0"
    local p = backoff.constant { delay = 0 }
    local calls = {
      function() return backoff.retry(p, print, { [huge] = 1 }) end,
      function() return backoff.balancer(backoff.constant { delay = 0,
        max_attempts = 2 }, { [huge] = 1 }) end,
      function() return backoff.budget { shared = huge } end,
      function() return backoff.budget { shared = false, [huge] = 1 } end,
    }
    for i, f in ipairs(calls) do
      local ok, err = pcall(f)
      assert.is_false(ok, "call " .. i)
      assert.is_true(#err < 200, "call " .. i .. ": " .. #err .. " bytes")
      assert.matches("xxx'...", err, 1, true)
    end
  end)
end)

describe("hints", function()
  local function policy(extra)
    local o = { initial_delay = 1, max_delay = 4, seed = 1 }
    for k, v in pairs(extra or {}) do o[k] = v end
    return backoff.exponential(o)
  end

  it("returns max(hint, the strategy's delay), not cut by max_delay",
    function()
      local b = policy()
      assert.equal(10, b:failure(0, 10))
      assert.equal(10, b:delay())
      assert.equal(2, b:failure(0))     -- the hint fed no memory
      assert.equal(4, b:failure(0, 0.5))
      assert.equal(4, b:failure(0, nil))
    end)

  it("gives up on a hint over max_hint, or one reaching the deadline",
    function()
      local b = policy { max_hint = 30, max_actual_duration = 100, start = 0 }
      assert.same({ nil, "retry_after" }, { b:failure(0, 31) })
      assert.equal(0, b:attempts())
      assert.same({ nil, "max_actual_duration" }, { b:failure(90, 10) })
      assert.equal(9, b:failure(90, 9))   -- not lasting
      assert.equal(30, b:config().max_hint)
      assert.is_nil(policy():config().max_hint)
    end)

  it("refuses a bad hint and leaves the object unchanged", function()
    for _, bad in ipairs { -1, 0 / 0, math.huge, "1", {}, true } do
      local b = policy()
      b:failure(0)
      local ok, err = pcall(b.failure, b, 0, bad)
      assert.is_false(ok)
      assert.matches("hint must be a finite number >= 0", err, 1, true)
      assert.equal(1, b:attempts())
      assert.equal(2, b:failure(0))
    end
  end)

  it("times out the next attempt from the hinted delay", function()
    local b = backoff.exponential { initial_delay = 1, start = 0,
      max_actual_duration = 100, adjust_timeout_factor = 0.5,
      min_adjust_timeout = 0 }
    local d, t = b:failure(0, 20)
    assert.equal(20, d)
    assert.equal(40, t)        -- (100 - 20) * 0.5
  end)
end)

describe("side data", function()
  -- issue 11: a clock closure that refers back to its object
  it("is collected with its object, even through a cycle", function()
    collectgarbage()
    collectgarbage()
    local before = collectgarbage("count")
    for _ = 1, 1e5 do
      local ctx = {}
      ctx.b = backoff.exponential { initial_delay = 1, start = 0,
        clock = function() return ctx.now or 0 end }
    end
    collectgarbage()
    collectgarbage()
    local grown = collectgarbage("count") - before
    assert.is_true(grown < 2048, ("heap grew by %.0f KiB"):format(grown))
  end)
end)
