-- The budgets on bad days (issue 26): the defects found by an outage
-- model written outside the project, each reproduced here first, and
-- the properties the rule of the recommended setting keeps on slow,
-- flapping and quiet days.  Time is a fake clock.

local budget = require "backoff.budget"
local new_dict = dofile("spec/budget_dict.lua")

local rng = require("spec.helpers").park_miller  -- the same stream on every Lua

-- a clock the specs move by hand
local function clock(t0)
  local c = { t = t0 or 1000 }
  c.now = function() return c.t end
  return c
end

-- a draw the spec reads back: the uniform stream of park_miller, each
-- draw kept in `draws`
local function counted_random(seed)
  local r = rng(seed)
  local c = { draws = {} }
  c.random = function()
    local d = (r(1000000) - 1) / 1000000
    c.draws[#c.draws + 1] = d
    return d
  end
  return c
end

local function both(make)       -- in-process and shared
  return { { "in-process", function(o) return make(o) end },
           { "shared", function(o)
               o.shared = new_dict()
               return make(o)
             end } }
end

------------------------------------------------------------------------
-- budget.adaptive: allows() keeps no grant beyond its moment

for _, w in ipairs(both(budget.adaptive)) do
  describe("budget.adaptive (" .. w[1] .. "): allows()", function()
    it("banks nothing for later: 20 allows() while healthy, an hour of "
       .. "failures, then withdraw() is refused as the throttle says",
       function()
      local c, r = clock(0), counted_random(7)
      local b = w[2] { clock = c.now, random = r.random }
      for _ = 1, 50 do b:record(true, 1) end
      for _ = 1, 20 do assert.is_true(b:allows()) end
      c.t = 3600                               -- the healthy counts expire
      for _ = 1, 1000 do b:record(false, 1) end
      local granted = 0
      local requests = 1000
      for _ = 1, 20 do
        local before = #r.draws
        local ok = b:withdraw()
        -- every decision is a draw of its own, at p = requests /
        -- (requests + 1) (no accepts), and a refusal counts a request
        assert.equal(before + 1, #r.draws)
        local p = requests / (requests + 1)
        assert.equal(r.draws[#r.draws] >= p, ok)
        if ok then granted = granted + 1 else requests = requests + 1 end
      end
      assert.is_true(granted <= 1, granted .. " of 20 granted")
    end)

    it("says what the next withdraw() does while nothing has changed, "
       .. "with one draw for both", function()
      local c, r = clock(500), counted_random(11)
      local b = w[2] { clock = c.now, random = r.random }
      local rand = rng(3)
      local agreed, refused = 0, 0
      for i = 1, 400 do
        b:record(rand(10) <= 3, 1)            -- 30% success: p near 0.4
        if i % 3 == 0 then c.t = c.t + 1 end
        local n = #r.draws
        local a = b:allows()
        assert.equal(a, b:allows())            -- a second peek: the same
        local ok = b:withdraw()
        assert.equal(a, ok, "call " .. i)
        assert.is_true(#r.draws <= n + 1)      -- one draw for the three
        agreed = agreed + 1
        if not ok then refused = refused + 1 end
      end
      assert.is_true(refused > 0 and refused < agreed)
    end)

    -- a random the spec scripts: the next draws, in order
    local function scripted(list)
      local i = 0
      return function()
        i = i + 1
        return assert(list[i], "no draw scripted")
      end
    end

    it("a draw allows() made is not used once the counts have moved: "
       .. "another try's withdraw() draws anew", function()
      local c = clock(500)
      local b = w[2] { clock = c.now, random = scripted { 0.99, 0, 0 } }
      for i = 1, 30 do b:record(i % 3 == 0, 1) end  -- p = 10 / 31
      assert.is_true(b:allows())               -- 0.99: allowed
      b:record(false, 2)                       -- the try failed: p moved
      assert.is_false(b:withdraw())            -- a new draw, 0: refused
      assert.is_false(b:withdraw())            -- nothing kept: 0 again
    end)

    it("a draw allows() made is not used once the clock has left its "
       .. "slice", function()
      local c = clock(500)
      local b = w[2] { clock = c.now, random = scripted { 0.99, 0 },
                       window = 10 }
      for i = 1, 30 do b:record(i % 3 == 0, 1) end
      assert.is_true(b:allows())
      c.t = c.t + 1                            -- the next slice
      assert.is_false(b:withdraw())
    end)
  end)
end

------------------------------------------------------------------------
-- budget.recommended on bad days: the rule's parts that bench/outage.lua
-- (make outage) measures -- the credit for recoveries, the first retry's
-- half of it, the price of a timeout

for _, where in ipairs { "in-process", "shared" } do
  local function make(c, opts)
    opts = opts or {}
    opts.clock = c.now
    if where == "shared" then
      opts.shared, opts.key = new_dict(), "api"
      return budget.earned(opts)
    end
    return budget.earned(opts)
  end

  -- `n` requests over `seconds`, each failing or not
  local function requests(b, c, n, seconds, ok)
    for _ = 1, n do
      c.t = c.t + seconds / n
      b:record(ok, 1)
    end
  end

  describe("budget.recommended (" .. where .. ") on bad days", function()
    it("lends per_recovery retries per failed request of a recovery, "
       .. "for one span", function()
      local c = clock(2000)
      local b = make(c)
      requests(b, c, 100, 10, true)            -- B = 8
      requests(b, c, 20, 2, false)             -- down 2 s: 20 requests
      assert.equal(0, b:credit())
      requests(b, c, 10, 1, true)              -- up: not two slices...
      assert.equal(0, b:credit())
      requests(b, c, 20, 2, true)              -- ...now past them
      assert.equal(5 * 20, b:credit())
      assert.equal(8 + 100, b:reserve())
      c.t = c.t + 10                           -- the span has passed
      assert.equal(0, b:credit())
    end)

    it("lends nothing for a blip (fewer than 3 failed requests), nor "
       .. "when a failure comes before the recovery is confirmed",
       function()
      local c = clock(2000)
      local b = make(c)
      requests(b, c, 100, 10, true)
      requests(b, c, 2, 0.2, false)            -- a blip
      requests(b, c, 30, 3, true)
      assert.equal(0, b:credit())
      requests(b, c, 10, 1, false)             -- down
      requests(b, c, 3, 0.3, true)             -- up briefly...
      requests(b, c, 1, 0.1, false)            -- ...down again
      requests(b, c, 30, 3, true)              -- this run: 1 request
      assert.equal(0, b:credit())
    end)

    it("lets a request's first retry use only half the credit; the "
       .. "requests already retrying the rest", function()
      local c = clock(2000)
      local b = make(c, { per_request = 0, per_failure = 0 })  -- B: 1
      requests(b, c, 8, 0.8, false)
      requests(b, c, 30, 3, true)
      assert.equal(40, b:credit())
      assert.equal(41, b:reserve())
      local first, later = 0, 0
      c.t = c.t + 0.01
      while true do                            -- dead: first retries
        b:record(false, 1)                     -- (inferred: attempt 2)
        if not b:withdraw() then break end
        first = first + 1
      end
      assert.equal(1 + 40 / 2, first)
      b:record(false, 2)                       -- a retry failed: the next
      while b:withdraw() do                    -- is attempt 3
        later = later + 1
        b:record(false, 3)
      end
      assert.equal(41 - first, later)
      -- told explicitly, whatever was recorded last
      b:record(false, 1)
      assert.is_false(b:allows(1, 3))
    end)

    it("a dead upstream after a healthy spell gets B alone, as before "
       .. "(no recovery seen: no credit)", function()
      for _, rate in ipairs { 2, 10, 40 } do
        local c = clock(1e6 + 0.5)
        local b = make(c)
        requests(b, c, 30 * rate, 30, true)
        local granted = 0
        for _ = 1, 60 * rate do
          c.t = c.t + 1 / rate
          b:record(false, 1)
          if b:withdraw() then
            granted = granted + 1
            b:record(false, 2)
          end
        end
        assert.equal(0, b:credit())
        assert.is_true(granted <= math.max(1, math.min(8, 0.8 * rate))
                       + 1e-9, "rate " .. rate .. ": " .. granted)
      end
    end)

    it("prices a retry after a timeout at timeout_cost (6) once an "
       .. "upstream hangs: after a hung spell, at most one such retry "
       .. "per success", function()
      local c = clock(2000)
      local b = make(c)
      assert.equal(6, b:timeout_cost())
      requests(b, c, 100, 10, true)
      -- hung for 10 s: the successes stop at once, the first timeout
      -- comes a second later; every retry at 6 tokens
      c.t = c.t + 1
      local granted, successes = 0, 0
      for _ = 1, 100 do
        c.t = c.t + 0.1
        b:record(false, 1)
        if b:withdraw(b:timeout_cost()) then granted = granted + 1 end
      end
      assert.equal(1, granted)                 -- B = 8: one retry of 6
      assert.equal(6, b:timeout_price())
      -- it recovers: new requests succeed while the hung ones time out
      granted = 0
      for _ = 1, 10 do
        c.t = c.t + 0.05
        b:record(true, 1)
        successes = successes + 1
        c.t = c.t + 0.05
        b:record(false, 1)
        if b:withdraw(b:timeout_cost()) then granted = granted + 1 end
      end
      assert.equal(6, b:timeout_price())
      assert.is_true(granted <= successes * b:success_share() + 1,
                     granted .. " retries for " .. successes .. " successes")
      -- the same failures, not timeouts (cost 1): about 3 per success
      local plain = 0
      for _ = 1, 10 do
        c.t = c.t + 0.05
        b:record(true, 1)
        c.t = c.t + 0.05
        b:record(false, 1)
        if b:withdraw() then plain = plain + 1 end
      end
      assert.is_true(plain > granted)
    end)

    it("prices a timeout's retry by the share T of the attempts of the "
       .. "last 3 slices that timed out: cost while T <= 0.58, "
       .. "timeout_cost from 0.7 on, a straight line between", function()
      local c = clock(2000)
      local b = make(c)
      requests(b, c, 200, 10, true)            -- B = 8
      c.t = math.floor(c.t) + 3.5              -- three slices on: B 8
      assert.equal(8, b:reserve())
      for _ = 1, 10 do b:record(true, 1) end
      -- half hung: 10 successes, then 10 timeouts (T from 1/11 to
      -- 10/20): each retry at cost 1, so the reserve pays 8 of them
      -- (at a flat 6: one)
      local granted = 0
      for k = 1, 10 do
        b:record(false, 1)
        if b:withdraw(6) then granted = granted + 1 end
        assert.equal(1, b:timeout_price(), "timeout " .. k)
      end
      assert.equal(8, granted)
      -- 3 more timeouts: T = 13 / 23 attempts = 0.565, still cost (a
      -- process alone at 50% hung sees such a share by chance)
      for _ = 1, 3 do
        b:record(false, 1)
        b:withdraw(6)
      end
      assert.equal(1, b:timeout_price())
      -- 2 more: T = 15 / 25 = 0.6, a sixth of the way from 0.58 to 0.7
      for _ = 1, 2 do
        b:record(false, 1)
        b:withdraw(6)
      end
      assert.is_true(math.abs(b:timeout_price() - (1 + 5 / 6)) < 0.001)
      -- 10 more: T = 25 / 35 = 0.71, past 0.7
      for _ = 1, 10 do
        b:record(false, 1)
        b:withdraw(6)
      end
      assert.equal(6, b:timeout_price())
      -- three slices later only successes: T = 0, the price is cost
      c.t = c.t + 3
      b:record(true, 1)
      assert.equal(1, b:timeout_price())
      -- a flat price where timeout_cost is cost, or with no span
      assert.equal(1, make(clock(), { timeout_cost = 1 }):timeout_price())
      local flat = make(clock(), { span = 0 })
      assert.equal(6, flat:timeout_price())
    end)

    it("lends nothing for a recovery shorter than 3/4 of the outage: a "
       .. "second outage 3 s after a 10 s one gets the reserve only, one "
       .. "8 s after it the credit", function()
      for _, up in ipairs { 3, 8 } do
        local c = clock(2000)
        local b = make(c)
        requests(b, c, 100, 10, true)          -- B = 8
        requests(b, c, 100, 10, false)         -- down 10 s
        requests(b, c, 10 * up, up, true)      -- up `up` s
        local granted = 0
        for _ = 1, 200 do                      -- down again, 4 s
          c.t = c.t + 0.02
          b:record(false, 1)
          if b:withdraw() then
            granted = granted + 1
            b:record(false, 2)
          end
        end
        if up == 3 then
          assert.equal(0, b:credit())
          assert.is_true(granted <= 8, granted .. " retries")
        else
          assert.equal(5 * 100, b:credit())
          assert.is_true(granted > 100, granted .. " retries")
        end
      end
    end)

    it("checks the attempt argument of withdraw and allows", function()
      local b = make(clock())
      for _, v in ipairs { 1, 0, -2, 2.5, 0 / 0, math.huge, "3", true } do
        for _, m in ipairs { "withdraw", "allows" } do
          local ok, err = pcall(b[m], b, 1, v)
          assert.is_false(ok)
          assert.matches("bad argument #2 to '" .. m .. "' %(attempt must "
            .. "be an integer >= 2", err)
        end
      end
      assert.is_true(b:withdraw(1, 2))
    end)
  end)
end

describe("budget.recommended (shared): the credit's slices", function()
  local function base36(n)
    local digits, out = "0123456789abcdefghijklmnopqrstuvwxyz", ""
    repeat
      local d = n % 36
      out = digits:sub(d + 1, d + 1) .. out
      n = (n - d) / 36
    until n == 0
    return out
  end

  it("counts a corrupt or foreign slice as 0, and a write to it deletes "
     .. "it", function()
    local dict, t = new_dict(), 3000.5
    local b = budget.recommended { shared = dict, clock = function()
      return t end }
    local key = b:dict_key() .. ":" .. base36(3000) .. ":r"
    for _, v in ipairs { "x", 0 / 0, math.huge, -5, 2.5, 2 ^ 60 } do
      dict.data[key] = v
      assert.equal(0, b:credit())
      assert.equal(1, b:reserve())
    end
    -- a recovery confirmed in that slice: the write finds the corrupt
    -- value, deletes it, and counts afresh on the missing key
    dict.data[key] = 2.5
    t = 2997.5                               -- another worker, earlier
    local w = budget.recommended { shared = dict, clock = function()
      return t end }
    for _ = 1, 5 do w:record(false, 1) end
    for _ = 1, 5 do t = t + 0.2 w:record(true, 1) end   -- slice 2998
    t = 3000.5
    w:record(true, 1)                        -- confirmed in slice 3000
    local lent = w:credit()
    assert.is_true(lent > 0 and lent < 1 / 0, tostring(lent))
    assert.equal(lent * 1000, dict.data[key])
    assert.equal(lent, b:credit())
  end)
end)
