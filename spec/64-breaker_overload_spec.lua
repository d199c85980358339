-- The breaker's graded refusal (lua/backoff/breaker/overload.lua,
-- doc/breaker.md "Overload"): a closed breaker refuses a share of its
-- attempts while its calls are slower than overload_latency, shared by
-- the workers of a host through one key; plain failures and hung calls
-- among fast successes never start it; a fast success writes nothing
-- while nothing is refused; a graded refusal is not held.  An injected
-- clock throughout (the world of spec/breaker_world.lua).
local backoff = require "backoff"
local breaker = backoff.breaker
local world, make = dofile("spec/breaker_world.lua")

-- a breaker of world w with the graded refusal at 0.5 s
local function graded(w, o)
  local opts = { overload_latency = 0.5 }
  for k, v in pairs(o or {}) do opts[k] = v end
  return make(w, opts)
end

-- n attempts, each allowed one recorded (ok, taking `seconds`), the
-- clock moved by `dt` after each; the refusals
local function calls(w, br, n, ok, seconds, dt)
  local refused = 0
  for _ = 1, n do
    local allowed, ticket = br:allow()
    if allowed then
      br:record(ok, ticket, seconds)
    else
      refused = refused + 1
    end
    w.t = w.t + (dt or 0.01)
  end
  return refused
end

local function refusing(br)
  local _, info = br:state()
  return info.refusing
end

describe("the graded refusal", function()
  it("is off in breaker.new, on at 0.5 s in breaker.recommended", function()
    local w = world()
    local plain = make(w)
    assert.equal(0, calls(w, plain, 200, true, 0.9))
    assert.is_nil(w.dict.data["api|g"])
    local rec = breaker.recommended { shared = w.dict, key = "rec",
                                      clock = w.clock, seed = 1 }
    assert.is_true(calls(w, rec, 200, true, 0.9) > 0)
    assert.is_true(refusing(rec) > 0)
    local off = breaker.recommended { shared = w.dict, key = "off",
      clock = w.clock, seed = 1, overload_latency = false }
    assert.equal(0, calls(w, off, 200, true, 0.9))
    assert.equal(0, refusing(off))
  end)

  it("refuses a bad overload_latency, naming it", function()
    for _, v in ipairs { 0, -1, 601, 0 / 0, math.huge, "0.5", true } do
      local ok, err = pcall(breaker.new, { overload_latency = v })
      assert.is_false(ok)
      assert.matches("option 'overload_latency' must be a number of "
                     .. "seconds > 0 and <= 600, or false", err, 1, true)
      ok, err = pcall(breaker.recommended, { overload_latency = v })
      assert.is_false(ok)
      assert.matches("'overload_latency'", err, 1, true)
    end
  end)

  it("writes nothing on a fast success while nothing is refused",
     function()
    local w = world()
    local on, off = graded(w, { key = "on" }), make(w, { key = "off" })
    calls(w, on, 5, true, 0.01)
    calls(w, off, 5, true, 0.01)
    local d = w.dict.ops
    -- call by call, at the same times (the streak is read once per
    -- window bucket: both must meet the same buckets)
    local plain, graded_ops = { 0, 0, 0, 0, 0 }, { 0, 0, 0, 0, 0 }
    local function counted(br, into)
      local before = { d.get, d.set, d.add, d.incr, d.delete }
      calls(w, br, 1, true, 0.01, 0)
      local after = { d.get, d.set, d.add, d.incr, d.delete }
      for i = 1, 5 do into[i] = into[i] + after[i] - before[i] end
    end
    for _ = 1, 100 do
      counted(off, plain)
      counted(on, graded_ops)
      w.t = w.t + 0.01
    end
    assert.same(plain, graded_ops)
    assert.is_nil(w.dict.data["on|g"])
  end)

  it("never starts on plain failures, however many, fast or hung",
     function()
    local w = world()
    -- failure_ratio 1: the breaker itself never opens here
    local br = graded(w, { failure_ratio = 1, min_calls = 2 ^ 31,
                           failures = 2 ^ 31 })
    for _ = 1, 50 do
      assert.equal(0, calls(w, br, 1, false, 0.01))
      assert.equal(0, calls(w, br, 1, false, 3))  -- hung: timed out
      assert.equal(0, calls(w, br, 1, true, 0.01))
    end
    assert.equal("closed", br:state())
    assert.equal(0, refusing(br))
    assert.is_nil(w.dict.data["api|g"])
  end)

  it("refuses nothing for a slow success among fast ones", function()
    local w = world()
    local br = graded(w)
    for _ = 1, 20 do
      assert.equal(0, calls(w, br, 1, true, 0.8))
      assert.equal(0, calls(w, br, 20, true, 0.01))
      assert.equal(0, refusing(br))
    end
  end)

  it("grows while calls stay slow, and is over once they are fast",
     function()
    local w = world()
    local br = graded(w)
    calls(w, br, 100, true, 0.8, 0.1)              -- 10 s of slow calls
    local p = refusing(br)
    assert.is_true(p > 0.2, p)
    assert.is_true(p <= 0.95, p)
    assert.equal("closed", br:state())
    -- timeouts while it refuses push it further
    calls(w, br, 20, false, 1, 0.1)
    assert.is_true(refusing(br) > p)
    -- fast calls again: the drop of the latency takes its share at
    -- once, then 5% a second: within 10 s, nothing refused
    local q = refusing(br)
    calls(w, br, 1, true, 0.01, 0.1)
    assert.is_true(refusing(br) < q - 0.1)
    calls(w, br, 100, true, 0.01, 0.1)
    assert.equal(0, refusing(br))
    assert.equal(0, calls(w, br, 100, true, 0.01, 0.1))
  end)

  it("never refuses more than 95% of the attempts", function()
    local w = world()
    local br = graded(w, { failure_ratio = 1, min_calls = 2 ^ 31,
                           failures = 2 ^ 31 })
    calls(w, br, 1, true, 0.8)
    -- timeouts only, for 40 s (within the key's minute)
    calls(w, br, 400, false, 5, 0.1)
    assert.equal(0.95, refusing(br))
    assert.equal(95, calls(w, br, 100, false, 5, 0.1))
  end)

  it("moves no further than 0 to the most on a call of hours", function()
    local w = world()
    local br = graded(w)
    calls(w, br, 1, true, 0.8)
    calls(w, br, 1, true, 7200)
    assert.equal(0.95, refusing(br))      -- at most 100% in a step, and
                                          -- brought back to 95%
    calls(w, br, 1, true, 0.01)
    assert.equal(0, refusing(br))
  end)

  it("refuses exactly its share, by error diffusion", function()
    local w = world()
    local br = graded(w)
    calls(w, br, 1, true, 0.8)                     -- takes part
    w.dict.data["api|g"] = 2500                    -- 25%
    local refused = 0
    for _ = 1, 100 do
      if not br:allow() then refused = refused + 1 end
    end
    assert.equal(25, refused)
    assert.equal(0.25, refusing(br))
  end)

  it("is shared by the workers of a host", function()
    local w = world()
    local a, b = graded(w), graded(w)
    calls(w, b, 1, true, 0.8)                      -- b takes part
    calls(w, a, 200, true, 0.9, 0.05)              -- a's calls are slow
    local p = refusing(b)
    assert.is_true(p > 0.1, p)
    assert.equal(p, refusing(a))
    local refused = 0
    for _ = 1, 100 do
      if not b:allow() then refused = refused + 1 end
    end
    assert.is_true(math.abs(refused - 100 * p) <= 1, refused)
    -- a fresh worker's fast calls count once it has seen a slow one
    local c = graded(w)
    calls(w, c, 1, true, 0.8)
    calls(w, c, 30, true, 0.01, 0.1)
    assert.is_true(refusing(a) < p - 0.1)
  end)

  it("is not held: the run ends at once, refused", function()
    local w = world()
    local br = breaker.recommended { shared = w.dict, key = "api",
                                     clock = w.clock, seed = 1 }
    assert.equal(4, br:hold())
    calls(w, br, 1, true, 0.8)
    w.dict.data["api|g"] = 9500
    local slept, called = 0, 0
    local policy = backoff.constant { delay = 0.3, max_attempts = 10,
                                      clock = w.clock }
    local results
    for _ = 1, 10 do                    -- the 19 in 20 that are refused
      results = { backoff.retry(policy, function() called = called + 1
        return true end, { breaker = br, sleep = function(d)
          slept = slept + d
          w.t = w.t + d
        end }) }
      if results[1] == nil then break end
    end
    assert.is_nil(results[1])
    assert.equal("circuit_open", results[3])
    assert.equal(0, slept)
    assert.equal(0, br:hold())
    -- an open breaker's refusal is held again
    br:force("open")
    assert.is_false(br:allow())
    assert.equal(4, br:hold())
  end)

  it("does not start within 2 x hold of an allow() while open",
     function()
    local w = world()
    local br = graded(w, { failures = 1, hold = 4 })
    br:record(false)
    assert.is_false(br:allow())                    -- open, seen now
    w.t = w.t + 1.5
    local ok, ticket = br:allow()                  -- the probe
    assert.is_true(ok)
    br:record(true, ticket, 0.01)
    assert.equal("closed", br:state())
    -- the held runs' queue: slow, but within 8 s of the probe's allow()
    assert.equal(0, calls(w, br, 60, true, 0.8, 0.1))
    assert.equal(0, refusing(br))
    w.t = w.t + 2.5
    calls(w, br, 1, true, 0.8)                     -- 8.5 s after: starts
    assert.is_true(refusing(br) > 0)
  end)

  it("never refuses in mode observe", function()
    local w = world()
    local br = graded(w, { mode = "observe" })
    assert.equal(0, calls(w, br, 200, true, 0.9, 0.1))
    assert.is_true(refusing(br) > 0)
  end)

  it("reads a foreign value as nothing refused", function()
    for _, v in ipairs { "x", 1e9, -1e9, 0.5, true } do
      local w = world()
      local br = graded(w)
      calls(w, br, 1, true, 0.8)
      w.dict.data["api|g"] = v
      assert.equal(0, calls(w, br, 50, true, 0.01, 0))
      assert.is_true(w.dict.data["api|g"] == nil
                     or type(w.dict.data["api|g"]) == "number"
                        and w.dict.data["api|g"] <= 9500)
    end
  end)

  it("forgets a share whose key expired", function()
    local w = world()
    local br = graded(w)
    calls(w, br, 100, true, 0.8, 0.1)
    assert.is_true(refusing(br) > 0)
    w.t = w.t + 61
    assert.equal(0, refusing(br))
    assert.equal(0, calls(w, br, 20, true, 0.01, 0.1))
  end)
end)
