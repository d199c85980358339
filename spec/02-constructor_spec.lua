-- Option validation: every mistake raises a message naming the
-- constructor and the option.
local backoff = require "backoff"
local helpers = require "spec.helpers"

local REQUIRED = helpers.REQUIRED

-- the options that only some strategies take
local OWN = {
  constant = { "delay", "delay_on_success" },
  linear = { "initial_delay", "delay_increment", "delay_on_success" },
  exponential = { "initial_delay", "exponent_base", "delay_on_success" },
  fibonacci = { "initial_delay", "initial_delay1", "initial_delay2",
                "delay_on_success" },
  lild = { "initial_delay", "delay_increment_on_failure",
           "delay_increment_on_success" },
  limd = { "initial_delay", "delay_increment_on_failure",
           "delay_multiple_on_success" },
  mild = { "initial_delay", "delay_multiple_on_failure",
           "delay_increment_on_success" },
  mimd = { "initial_delay", "delay_multiple_on_failure",
           "delay_multiple_on_success" },
  decorrelated = { "initial_delay", "multiplier", "delay_on_success" },
  retry_timeouts = { "initial_delay", "exponent_base", "delay_on_success" },
}

local function with(t, k, v)
  local c = {}
  for a, b in pairs(t) do c[a] = b end
  c[k] = v
  return c
end

local function raises(s, opts, text)
  assert.error_matches(function() backoff.new(s, opts) end, text, nil, true)
  assert.error_matches(function() backoff[s](opts) end, text, nil, true)
end

describe("constructors", function()
  for s, req in pairs(REQUIRED) do
    describe(s, function()
      it("builds from its required options", function()
        assert.is_userdata(backoff.new(s, req))
        assert.is_userdata(backoff[s](req))
      end)

      it("names each missing required option", function()
        for k in pairs(req) do
          raises(s, with(req, k, nil), "backoff." .. s
            .. ": missing required option '" .. k .. "'")
        end
      end)

      it("suggests the option a misspelt name was meant as", function()
        raises(s, with(req, "max_attemps", 3),
          "backoff." .. s .. ": unknown option 'max_attemps' (did you "
          .. "mean 'max_attempts'?)")
        -- far from every name: no suggestion
        local ok, err = pcall(backoff[s], with(req, "zzzzzz", 1))
        assert.is_false(ok)
        assert.is_nil(err:find("did you mean", 1, true), err)
      end)

      it("rejects unknown options, including other strategies'", function()
        raises(s, with(req, "max_attemps", 3),
          "backoff." .. s .. ": unknown option 'max_attemps'")
        local mine = {}
        for _, k in ipairs(OWN[s]) do mine[k] = true end
        for _, other in pairs(OWN) do
          for _, k in ipairs(other) do
            if not mine[k] then
              raises(s, with(req, k, 1), "backoff." .. s
                .. ": unknown option '" .. k .. "'")
            end
          end
        end
      end)

      it("rejects wrong types, numeric strings, NaN and infinities", function()
        for k, v in pairs(req) do
          for _, bad in ipairs { "10", true, {}, 0 / 0, math.huge,
                                 -math.huge } do
            raises(s, with(req, k, bad), "option '" .. k .. "' must be")
          end
          local _ = v
        end
        for _, k in ipairs { "min_delay", "max_delay", "max_actual_duration",
                             "max_attempts", "start" } do
          for _, bad in ipairs { "1", 0 / 0, math.huge, false } do
            raises(s, with(req, k, bad), "option '" .. k .. "' must be")
          end
        end
      end)

      it("rejects negative times and out-of-range factors", function()
        for _, k in ipairs { "min_delay", "max_delay", "max_actual_duration",
                             "max_attempts" } do
          raises(s, with(req, k, -1),
            "option '" .. k .. "' must be")
        end
        if s ~= "decorrelated" then
          raises(s, with(req, "jitter_factor", 1.5),
            "option 'jitter_factor' must be a number in [0, 1] (got 1.5)")
          raises(s, with(req, "jitter_factor", -0.1), "option 'jitter_factor'")
        end
        raises(s, with(req, "adjust_timeout_factor", 2),
          "option 'adjust_timeout_factor' must be a number in [0, 1]")
      end)

      it("rejects non-integer max_attempts and seed, alike on every Lua",
        function()
          raises(s, with(req, "max_attempts", 2.5),
            "option 'max_attempts' must be an integer >= 0 (got 2.5)")
          raises(s, with(req, "seed", 2.5),
            "option 'seed' must be an integer (got 2.5)")
          raises(s, with(req, "seed", "7"), "option 'seed' must be an integer")
          assert.is_userdata(backoff.new(s, with(req, "max_attempts", 3.0)))
          assert.is_userdata(backoff.new(s, with(req, "seed", -7)))
        end)

      it("accepts its own name as a strategy option, no other", function()
        assert.is_userdata(backoff.new(s, with(req, "strategy", s)))
        raises(s, with(req, "strategy", s == "linear" and "constant"
          or "linear"), "option 'strategy' must be '" .. s .. "'")
      end)

      it("config() lists every effective option and rebuilds", function()
        -- start 0: the timestamps below must not depend on the uptime
        local b = backoff.new(s, with(with(req, "seed", 5), "start", 0))
        local c = b:config()
        assert.equal(s, c.strategy)
        assert.equal(5, c.seed)
        for k, v in pairs(req) do
          if not (s == "fibonacci" and k == "initial_delay") then
            assert.equal(v, c[k], k)
          end
        end
        local twin = backoff.new(c.strategy, c)
        assert.same(c, twin:config())
        for i = 1, 10 do
          assert.equal(b:failure(i), twin:failure(i))
        end
      end)
    end)
  end

  it("reports an unknown strategy or jitter by name", function()
    assert.error_matches(function() backoff.new("quadratic", {}) end,
      "unknown strategy 'quadratic'", nil, true)
    assert.error_matches(function() backoff.new(nil, {}) end,
      "backoff.new: argument 1 must be a strategy name (got nil); see "
      .. "backoff.strategies", nil, true)
    assert.error_matches(function()
      backoff.constant { delay = 1, jitter = "loud" }
    end, "option 'jitter' must be 'none', 'proportional', 'full' or 'equal'"
      .. " (got 'loud')", nil, true)
  end)

  it("says how to call backoff.new when given one table of options",
    function()
      -- the strategy inside, as config() gives it: named in the fix
      assert.error_matches(function()
        backoff.new { strategy = "constant", delay = 1 }
      end, "backoff.new: argument 1 must be a strategy name (got table); "
        .. 'use backoff.new("constant", opts) or backoff.constant(opts)',
        nil, true)
      for _, opts in ipairs { { delay = 1 }, { strategy = "nope" },
                              { strategy = 1 } } do
        assert.error_matches(function() backoff.new(opts) end,
          "backoff.new: argument 1 must be a strategy name (got table); "
          .. "use backoff.new(opts.strategy, opts) or "
          .. "backoff.<strategy>(opts)", nil, true)
      end
      -- read raw: a proxy's __index is not consulted
      local proxy = setmetatable({}, { __index = function()
        error("consulted")
      end })
      assert.error_matches(function() backoff.new(proxy) end,
        "use backoff.new(opts.strategy, opts)", nil, true)
      -- the fix it names works
      local opts = { strategy = "constant", delay = 1 }
      assert.equal(1, backoff.new(opts.strategy, opts):failure(0))
    end)

  it("rejects a non-table options argument", function()
    assert.error_matches(function() backoff.constant("delay=1") end,
      "backoff.constant: options must be a table (got string)", nil, true)
    assert.error_matches(function() backoff.constant { [1] = 2, delay = 1 } end,
      "backoff.constant: unknown option 1", nil, true)
  end)

  it("quotes the offending value as in API.md", function()
    assert.error_matches(function() backoff.constant { delay = -1 } end,
      "backoff.constant: option 'delay' must be a finite number >= 0 (got -1",
      nil, true)
  end)

  it("rejects a jitter factor with another jitter kind", function()
    assert.error_matches(function()
      backoff.exponential { initial_delay = 1, jitter = "full",
                            jitter_factor = 0.2 }
    end, "option 'jitter_factor' must be 0 with jitter 'full'", nil, true)
    assert.error_matches(function()
      backoff.decorrelated { initial_delay = 1, max_delay = 9, jitter = "full" }
    end, "unknown option 'jitter'", nil, true)
  end)

  it("needs adjust_timeout_factor before other timeout options", function()
    assert.error_matches(function()
      backoff.constant { delay = 1, min_adjust_timeout = 2 }
    end, "option 'min_adjust_timeout' needs option 'adjust_timeout_factor'",
      nil, true)
  end)

  it("fills in the documented defaults", function()
    local c = backoff.retry_timeouts():config()
    assert.near(math.sqrt(2), c.initial_delay, 1e-15)
    assert.near(math.sqrt(2), c.exponent_base, 1e-15)
    assert.is_true(c.consider_actual_delay)
    assert.equal(8, c.max_attempts)
    assert.equal(50, c.max_actual_duration)
    assert.equal(0.1, c.jitter_factor)
    assert.equal("proportional", c.jitter)
    assert.equal(0.1, c.timeout_jitter_factor)
    assert.equal(0.5, c.adjust_timeout_factor)
    assert.equal(5, c.min_adjust_timeout)
    local e = backoff.exponential { initial_delay = 1 }:config()
    assert.equal(2, e.exponent_base)
    assert.equal(0, e.delay_on_success)
    assert.equal("none", e.jitter)
    assert.is_nil(e.max_delay)
    assert.is_nil(e.adjust_timeout_factor)
    assert.equal(3, backoff.decorrelated { initial_delay = 1,
      max_delay = 5 }:config().multiplier)
    local lin = backoff.linear { initial_delay = 4 }:config()
    assert.equal(4, lin.delay_increment)
    assert.equal("proportional", backoff.constant { delay = 1,
      jitter_factor = 0.3 }:config().jitter)
    local f = backoff.fibonacci { initial_delay = 3 }:config()
    assert.equal(3, f.initial_delay1)
    assert.equal(3, f.initial_delay2)
  end)
end)
