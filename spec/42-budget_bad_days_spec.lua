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
