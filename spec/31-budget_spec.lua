-- The token bucket, backoff.budget: one object and one algorithm,
-- in-process (a dict of this Lua state) and shared through an
-- ngx.shared dict, here a fake one with lua-resty-core's incr/get
-- semantics.

local budget = require "backoff.budget"

-- a fake ngx.shared dict: incr(key, value, init) as lua-resty-core's
-- (a missing key without init is "not found"; with init, it becomes
-- init + value); on_incr, if set, runs after every incr (to interleave)
local function fake_dict()
  local d = { data = {}, incrs = 0 }
  function d.incr(self, key, value, init)
    assert(type(value) == "number", "bad value")
    local v = self.data[key]
    if v == nil then
      if init == nil then return nil, "not found" end
      v = init
    elseif type(v) ~= "number" then
      return nil, "not a number"
    end
    v = v + value
    self.data[key] = v
    self.incrs = self.incrs + 1
    if self.on_incr then self.on_incr() end
    return v
  end
  function d.get(self, key) return self.data[key] end
  function d.delete(self, key) self.data[key] = nil end
  return d
end

local kinds = {
  { name = "in-process", make = function(opts) return budget(opts) end },
  { name = "shared", make = function(opts)
      opts = opts or {}
      opts.shared = fake_dict()
      return budget(opts)
    end },
}

for _, kind in ipairs(kinds) do
  local make = kind.make

  describe("a " .. kind.name .. " budget", function()
    it("defaults to AWS's retry quota: 500 tokens, cost 5, refund 1",
       function()
      local b = make()
      assert.equal(500, b:capacity())
      assert.equal(5, b:cost())
      assert.equal(1, b:refund())
      assert.equal(500, b:tokens())      -- starts full
    end)

    it("withdraws cost until short, then refuses and takes nothing",
       function()
      local b = make { capacity = 12, cost = 5, refund = 2 }
      assert.is_true(b:withdraw())
      assert.equal(7, b:tokens())
      assert.is_true(b:withdraw())
      assert.equal(2, b:tokens())
      assert.is_false(b:withdraw())
      assert.equal(2, b:tokens())
      assert.is_false(b:withdraw(3))
      assert.is_true(b:withdraw(2))
      assert.equal(0, b:tokens())
      assert.is_true(b:withdraw(0))
      assert.is_false(b:withdraw(1))
    end)

    it("deposits refund or n, capped at capacity", function()
      local b = make { capacity = 10, cost = 10, refund = 3 }
      assert.is_true(b:withdraw())
      assert.equal(3, b:deposit())
      assert.equal(3, b:tokens())
      assert.equal(9, b:deposit(6))
      assert.equal(10, b:deposit())
      assert.equal(10, b:deposit(2 ^ 53))
      assert.equal(10, b:tokens())
      assert.equal(10, b:deposit(0))
    end)

    it("takes the 100 retries of a full default budget, then none",
       function()
      local b = make()
      for _ = 1, 100 do assert.is_true(b:withdraw()) end
      assert.is_false(b:withdraw())
      for _ = 1, 4 do b:deposit() end
      assert.is_false(b:withdraw())
      b:deposit()
      assert.is_true(b:withdraw())
    end)

    it("allows a cost above capacity (never met) and zero counts",
       function()
      local b = make { capacity = 3, cost = 5, refund = 0 }
      assert.is_false(b:withdraw())
      assert.equal(3, b:deposit())
      local z = make { capacity = 0, cost = 0, refund = 0 }
      assert.is_true(z:withdraw())
      assert.equal(0, z:deposit(7))
      assert.equal(0, z:tokens())
    end)

    it("names the budget in tostring", function()
      assert.matches("^backoff%.budget: ", tostring(make()))
    end)

    it("refuses bad options with the module's messages", function()
      local cases = {
        { { cost = -1 }, "option 'cost' must be an integer >= 0" },
        { { cost = -1 }, "option 'cost' must be an integer >= 0 and <= 2^53 "
                         .. "(got -1)" },
        { { capacity = 2.5 }, "option 'capacity' must be an integer >= 0" },
        { { refund = "1" }, "option 'refund' must be an integer >= 0" },
        { { capacity = 0 / 0 }, "option 'capacity' must be an integer >= 0 "
                               .. "and <= 2^" },
        { { capacity = math.huge }, "option 'capacity'" },
        { { capacity = 2 ^ 53 + 2 }, "option 'capacity'" },
        { { cost = 0 / 0 }, "option 'cost' must be an integer >= 0 "
                            .. "and <= 2^53 (got nan)" },
        { { capcity = 1 }, "unknown option 'capcity'" },
        { { 1 }, "unknown option 1" },
      }
      for _, c in ipairs(cases) do
        assert.error_matches(function() make(c[1]) end,
                             "backoff.budget: " .. c[2], nil, true)
      end
      assert.has_no.errors(function() make { capacity = 2 ^ 40 } end)
    end)

    it("refuses bad arguments and is unchanged after them", function()
      local b = make { capacity = 20, cost = 5, refund = 1 }
      assert.is_true(b:withdraw())
      for _, bad in ipairs { -1, 2.5, 0 / 0, math.huge, 2 ^ 54, "5", true,
                             {} } do
        assert.error_matches(function() b:withdraw(bad) end,
          "bad argument #1 to 'withdraw' (cost must be an integer >= 0",
          nil, true)
        assert.error_matches(function() b:deposit(bad) end,
          "bad argument #1 to 'deposit' (n must be an integer >= 0",
          nil, true)
      end
      assert.equal(15, b:tokens())
      assert.is_true(b:withdraw())
      assert.equal(10, b:tokens())
    end)

    it("refuses a wrong self", function()
      local b = make()
      for _, m in ipairs { "withdraw", "deposit", "tokens", "capacity" } do
        assert.has_error(function() return b[m]({}) end)
        assert.has_error(function() return b[m]() end)
        assert.has_error(function() return b[m](io.stdout) end)
      end
    end)
  end)
end

describe("budget(opts)", function()
  it("is one kind of object in-process and shared, and refuses a "
     .. "non-table", function()
    local b = budget { capacity = 7 }
    local s = budget { capacity = 7, shared = fake_dict() }
    assert.equal("table", type(b))
    assert.equal(getmetatable(b), getmetatable(s))
    assert.equal(getmetatable(b), getmetatable(budget.token_bucket()))
    assert.equal(getmetatable(b), getmetatable(budget { shared = false }))
    assert.equal("token_bucket", budget.kind(b))
    assert.equal("token_bucket", budget.kind(s))
    assert.is_nil(b:dict_key())
    assert.equal("backoff:budget|t7.5.1", s:dict_key())
    assert.equal("backoff.budget: 7/7 tokens (cost 5, refund 1)",
                 tostring(b))
    assert.equal("backoff.budget: shared 'backoff:budget|t7.5.1', 7/7 "
                 .. "tokens (cost 5, refund 1)", tostring(s))
    assert.error_matches(function() budget(5) end,
      "backoff.budget: options must be a table (got number)", nil, true)
  end)

  it("has one set of limits, in-process and shared: capacity up to "
     .. "2^40, cost and refund up to 2^53", function()
    for _, shared in ipairs { false, true } do
      local function make(o)
        if shared then o.shared = fake_dict() end
        return budget(o)
      end
      local b = make { capacity = 2 ^ 40, cost = 2 ^ 53, refund = 2 ^ 53 }
      assert.equal(2 ^ 40, b:tokens())
      assert.is_false(b:withdraw())          -- cost above capacity
      assert.is_true(b:withdraw(2 ^ 40))
      assert.equal(0, b:tokens())
      assert.equal(2 ^ 40, b:deposit())      -- refund 2^53, clamped
      assert.error_matches(function() make { capacity = 2 ^ 40 + 1 } end,
        "backoff.budget: option 'capacity' must be an integer >= 0 and "
        .. "<= 2^40 (got 1099511627777", nil, true)
      assert.error_matches(function() make { cost = 2 ^ 53 + 2 } end,
        "option 'cost' must be an integer >= 0 and <= 2^53", nil, true)
    end
  end)

  it("checks shared and key", function()
    assert.error_matches(function() budget { shared = 5 } end,
      "backoff.budget: option 'shared' must be an ngx.shared dict (got 5), "
      .. "or false for one budget per worker", nil, true)
    assert.error_matches(function() budget { shared = false, key = "k" }
    end, "option 'shared' must be an ngx.shared dict (got false; option "
      .. "'key' names a key in it, so it needs shared)", nil, true)
    assert.error_matches(function() budget { key = "k" } end,
      "option 'shared' must be an ngx.shared dict (got nil; option 'key' "
      .. "names a key in it, so it needs shared)", nil, true)
    assert.error_matches(function()
      budget { shared = fake_dict(), key = "" }
    end, "option 'key' must be a non-empty string (got '')", nil, true)
    assert.error_matches(function()
      budget { shared = fake_dict(), key = 3 }
    end, "option 'key' must be a non-empty string (got 3)", nil, true)
    assert.error_matches(function()
      budget { shared = fake_dict(), cost = -2 }
    end, "backoff.budget: option 'cost' must be an integer >= 0", nil, true)
    assert.error_matches(function()
      budget { shared = fake_dict(), colour = 1 }
    end, "backoff.budget: unknown option 'colour'", nil, true)
  end)
end)

describe("a shared budget", function()
  it("keeps its tokens in the dict under key and its configuration",
     function()
    local d = fake_dict()
    local a = budget { shared = d, capacity = 10 }
    local b = budget { shared = d, capacity = 10 }
    local other = budget { shared = d, capacity = 10, key = "other" }
    local k = a:dict_key()
    assert.equal("backoff:budget|ta.5.1", k)   -- t, then 10, 5, 1 in base 36
    assert.is_nil(d.data[k])                 -- a missing key is full
    assert.equal(10, a:tokens())
    assert.is_true(a:withdraw())
    assert.equal(5, d.data[k])
    assert.is_true(b:withdraw())             -- the same tokens
    assert.is_false(a:withdraw())
    assert.is_false(b:withdraw())
    assert.equal(10, other:tokens())
    assert.is_true(other:withdraw())
    assert.equal(5, d.data[other:dict_key()])
  end)

  it("gives two configurations on one key counters of their own",
     function()
    -- the defect: a capacity-500 budget and a capacity-2000 one on the
    -- default key shared one counter, and the small one granted 2000
    local d = fake_dict()
    local small = budget { shared = d, capacity = 500, cost = 1 }
    local big = budget { shared = d, capacity = 2000, cost = 1 }
    assert.is_true(big:withdraw())           -- the big one writes first
    local n = 0
    while small:withdraw() do n = n + 1 end
    assert.equal(500, n)
    assert.equal(1999, big:tokens())
    assert.are_not.equal(small:dict_key(), big:dict_key())
  end)

  it("treats an evicted key as full again", function()
    local d = fake_dict()
    local b = budget { shared = d, capacity = 10, cost = 10 }
    assert.is_true(b:withdraw())
    assert.is_false(b:withdraw())
    d.data[b:dict_key()] = nil
    assert.equal(10, b:tokens())
    assert.is_true(b:withdraw())
  end)

  it("treats a foreign value under its key as missing: deletes it, full "
     .. "again", function()
    for _, v in ipairs { "text", 1 / 0, -1 / 0, 0 / 0, 2 ^ 53, 1e15, 2.5,
                         -1e9, true } do
      local d = fake_dict()
      local b = budget { shared = d, capacity = 500 }
      local k = b:dict_key()
      d.data[k] = v
      assert.equal(500, b:tokens())          -- never NaN, never refused
      assert.is_nil(d.data[k])               -- deleted by the read
      d.data[k] = v
      assert.is_true(b:allows())
      assert.is_nil(d.data[k])
      d.data[k] = v
      -- a write that meets it: deleted, and made on the missing key
      assert.is_true(b:withdraw())
      assert.equal(495, b:tokens())
      d.data[k] = v
      assert.equal(500, b:deposit())
      assert.equal(500, d.data[k])
    end
  end)


  it("stays exact at capacity: a deposit of 2^53 leaves it full",
     function()
    local d = fake_dict()
    local b = budget { shared = d, capacity = 0, cost = 1 }
    assert.equal(0, b:deposit(2 ^ 53))
    assert.equal(0, d.data[b:dict_key()])
    assert.is_false(b:withdraw())            -- no retry granted
    local c = budget { shared = d, capacity = 2 ^ 40, cost = 1 }
    assert.equal(2 ^ 40, c:deposit(2 ^ 53))
    assert.equal(2 ^ 40, d.data[c:dict_key()])
    assert.is_true(c:withdraw())
    assert.equal(2 ^ 40 - 1, c:tokens())
    assert.is_false(c:withdraw(2 ^ 53))      -- above capacity: untouched
    assert.equal(2 ^ 40 - 1, d.data[c:dict_key()])
  end)

  -- Workers are coroutines that yield after each incr, so every
  -- interleaving of their dict steps can be run.  Each worker does a
  -- random mix of withdrawals and deposits; checked: the successful
  -- withdrawals never exceed the initial tokens plus the deposits, the
  -- counter ends at most capacity, the accounting is exact, and
  -- tokens() stays in [0, capacity].
  local function run(seed, workers, cap, cost)
    local rng = seed
    local function rand(n)   -- a small LCG, the same on every Lua
      rng = (rng * 1103515245 + 12345) % 2147483648
      return rng % n + 1
    end
    local d = fake_dict()
    local bud = budget { shared = d, capacity = cap, cost = cost }
    d.on_incr = function() coroutine.yield() end
    local withdrawn, deposited, live = 0, 0, {}
    for w = 1, workers do
      live[w] = coroutine.create(function()
        for _ = 1, 30 do
          if rand(3) == 1 then
            local n = rand(7) - 1
            deposited = deposited + n     -- counted when it starts
            bud:deposit(n)
          elseif bud:withdraw() then
            withdrawn = withdrawn + cost
          end
        end
      end)
    end
    while #live > 0 do
      local i = rand(#live)
      assert(coroutine.resume(live[i]))
      if coroutine.status(live[i]) == "dead" then table.remove(live, i) end
      local t = bud:tokens()   -- plain asserts: this loop runs often
      assert(t >= 0 and t <= cap, "tokens() out of range")
      assert(withdrawn <= cap + deposited, "overdrawn")
    end
    local v = d.data[bud:dict_key()] or cap
    assert.is_true(v <= cap, "counter above capacity: " .. v)
    return v, withdrawn, deposited
  end

  it("never overdraws nor ends above capacity, in any interleaving",
     function()
    local debts, runs = 0, 0
    for seed = 1, 150 do
      for _, shape in ipairs { { 2, 10, 5 }, { 3, 12, 4 }, { 2, 5, 5 } } do
        local v = run(seed, shape[1], shape[2], shape[3])
        runs = runs + 1
        if v < 0 then debts = debts + 1 end
      end
    end
    assert.equal(450, runs)
    assert.is_true(debts < runs)   -- a debt needs a rare race
  end)

  it("ends in [0, capacity] when the workers do not overlap", function()
    local d = fake_dict()
    local a = budget { shared = d, capacity = 10, cost = 3 }
    local b = budget { shared = d, capacity = 10, cost = 3 }
    for i = 1, 50 do
      local x = i % 2 == 0 and a or b
      if i % 3 == 0 then x:deposit(i % 5) else x:withdraw() end
      local v = d.data[a:dict_key()] or 10
      assert.is_true(v >= 0 and v <= 10)
    end
  end)
end)

describe("backoff.budget messages", function()
  it("match keys exactly and quote only a short prefix", function()
    local new = require("backoff").budget
    local ok, err = pcall(new, { ["cost\0x"] = 1 })
    assert.is_false(ok)
    assert.matches("unknown option 'cost\\000x'", err, 1, true)
    ok, err = pcall(new, { cost = string.rep("y", 1024 * 1024) })
    assert.is_false(ok)
    assert.is_true(#err < 200, "message of " .. #err .. " bytes")
  end)
end)
