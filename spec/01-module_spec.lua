-- The module table: what require "backoff" gives, and nothing more.
local ALL = { "constant", "linear", "exponential", "fibonacci", "lild",
  "limd", "mild", "mimd", "decorrelated", "retry_timeouts",
  -- the systems users port from
  "google", "cenkalti", "eventsauce", "polly", "decorrelated_v2", "aws" }

describe("require 'backoff'", function()
  it("returns a table and sets no global", function()
    package.loaded.backoff, package.loaded["backoff.core"] = nil, nil
    local before = {}
    for k in pairs(_G) do before[k] = true end
    local backoff = require "backoff"
    assert.is_table(backoff)
    for k in pairs(_G) do
      assert.is_true(before[k], "new global: " .. tostring(k))
    end
  end)

  it("has _VERSION 'backoff 0.2.0'", function()
    assert.equal("backoff 0.2.0", require("backoff")._VERSION)
  end)

  it("lists every strategy, each with its constructor", function()
    local backoff = require "backoff"
    assert.same(ALL, backoff.strategies)
    for _, name in ipairs(ALL) do
      assert.is_function(backoff[name], name)
    end
    assert.is_function(backoff.new)
    assert.is_function(backoff.retry)
  end)

  it("strategies is a copy: changing it changes nothing", function()
    local backoff = require "backoff"
    backoff.strategies[1] = "nope"
    package.loaded.backoff = nil
    local fresh = require "backoff"
    assert.equal("constant", fresh.strategies[1])
  end)

  it("now() is a monotonic clock in seconds", function()
    local backoff = require "backoff"
    local a = backoff.now()
    local b = backoff.now()
    assert.is_number(a)
    assert.is_true(b >= a)
  end)

  it("sleep() waits at least as long as asked", function()
    local backoff = require "backoff"
    local a = backoff.now()
    backoff.sleep(0.02)
    assert.is_true(backoff.now() - a >= 0.019)
    backoff.sleep(0)
  end)

  it("sleep() rejects negative, NaN, infinite and non-numbers", function()
    local backoff = require "backoff"
    for _, bad in ipairs { -1, 0 / 0, math.huge, "1", {}, true } do
      assert.error_matches(function() backoff.sleep(bad) end,
        "seconds must be a finite number >= 0", nil, true)
    end
    assert.has_error(function() backoff.sleep() end)
  end)

  it("a second load keeps old and new objects working together", function()
    local old_core = require "backoff.core"
    local old = require("backoff").exponential { initial_delay = 1, seed = 1 }
    package.loaded.backoff, package.loaded["backoff.core"] = nil, nil
    local fresh = require "backoff"
    local new = fresh.exponential { initial_delay = 1, seed = 1 }
    assert.are_not.equal(old_core, require "backoff.core")
    assert.equal(1, old:failure(0))
    assert.equal(1, new:failure(0))
    -- the methods of either load accept the objects of the other
    assert.equal(2, old_core.methods.failure(new, 0))
    assert.equal(2, require("backoff.core").methods.failure(old, 0))
    assert.equal(1, old:clone():failure(0))
  end)
end)
