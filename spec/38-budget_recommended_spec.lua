-- The recommended setting, budget.recommended(): its rule (doc/budget.md,
-- "The recommended setting") checked call for call against a model
-- written from the rule's text, and the properties the figures of
-- bench/outage.lua rest on.

local budget = require "backoff.budget"
local new_dict = dofile("spec/budget_dict.lua")

-- Park-Miller: the same stream on every Lua
local function rng(seed)
  local x = seed % 2147483646 + 1
  return function(n)
    x = x * 48271 % 2147483647
    return x % n + 1
  end
end

-- the rule, in thousandths of a token: reserve 8 (full at the start); a
-- retry takes 1; a success earns round(6000 x s), s being the moving
-- average (weight 1/200) of the outcomes before it, starting at 1;
-- nothing beyond 8
local function model()
  local m = { t = 8000, s = 1 }
  function m.record(ok)
    if ok then
      m.t = math.min(8000, m.t + math.floor(6000 * m.s + 0.5))
      m.s = m.s + (1 - m.s) / 200
    else
      m.s = m.s - m.s / 200
    end
  end
  function m.withdraw()
    if m.t < 1000 then return false end
    m.t = m.t - 1000
    return true
  end
  return m
end

for _, where in ipairs { "in-process", "shared" } do
  local function make()
    if where == "shared" then
      return budget.recommended { shared = new_dict(), key = "api" }
    end
    return budget.recommended()
  end

  describe("budget.recommended (" .. where .. ")", function()
    it("has the documented settings", function()
      local b = make()
      assert.equal(8, b:capacity())
      assert.equal(1, b:cost())
      assert.equal(6, b:earn())
      assert.equal(200, b:window())
      assert.equal(9, b:throttle_cost())
      assert.equal(8, b:tokens())
      assert.equal(1, b:success_share())
    end)

    it("follows the rule call for call over mixed outcomes", function()
      for _, fail_in in ipairs { 2, 3, 5, 10 } do  -- 50% .. 90% failures
        local b, m = make(), model()
        local rand = rng(fail_in)
        local granted = 0
        for i = 1, 4000 do
          local ok = rand(fail_in) == 1
          b:record(ok, 1)
          m.record(ok)
          if not ok then
            local want = m.withdraw()
            assert.equal(want, b:withdraw(), "call " .. i)
            if want then granted = granted + 1 end
          end
          assert.is_true(math.abs(b:tokens() - m.t / 1000) < 1e-9)
          assert.is_true(math.abs(b:success_share() - m.s) < 1e-12)
        end
        assert.is_true(granted > 0)
      end
    end)

    it("stops retrying a dead upstream after 8 retries", function()
      local b = make()
      local n = 0
      for _ = 1, 1000 do
        b:record(false, 1)
        if b:withdraw() then n = n + 1 end
      end
      assert.equal(8, n)
      assert.equal(0, b:tokens())
    end)

    it("never refuses at 50% failures once warm: a success earns about 3",
       function()
      local b = make()
      local rand = rng(50)
      local refused = 0
      for _ = 1, 20000 do
        local ok = rand(2) == 1
        b:record(ok, 1)
        if not ok and not b:withdraw() then refused = refused + 1 end
      end
      -- refusals need about 8 failures in a row: 2^-8 of the failures
      assert.is_true(refused < 10000 / 100, "refused " .. refused)
      assert.is_true(math.abs(b:success_share() - 0.5) < 0.15)
    end)

    it("at 80% failures grants about 1.2 retries per success", function()
      local b = make()
      local rand = rng(80)
      for _ = 1, 2000 do b:record(rand(5) == 1, 1) end     -- warm up
      local successes, granted = 0, 0
      for _ = 1, 20000 do
        local ok = rand(5) == 1
        if ok then successes = successes + 1 end
        b:record(ok, 1)
        if not ok and b:withdraw() then granted = granted + 1 end
      end
      local per = granted / successes
      assert.is_true(per > 1.0 and per < 1.4, "retries per success " .. per)
    end)

    it("never grants a retry after an overload answer", function()
      local b = make()
      assert.equal(8, b:tokens())
      assert.is_false(b:allows(b:throttle_cost()))
      assert.is_false(b:withdraw(b:throttle_cost()))
      assert.equal(8, b:tokens())
    end)
  end)
end

describe("budget.recommended shared by workers", function()
  it("shares the tokens; each worker keeps its own success share",
     function()
    local dict = new_dict()
    local a = budget.recommended { shared = dict }
    local b = budget.recommended { shared = dict }
    for _ = 1, 8 do assert.is_true(a:withdraw()) end
    assert.is_false(b:withdraw())
    a:record(false, 2)
    assert.is_true(a:success_share() < 1)
    assert.equal(1, b:success_share())
    b:record(true, 1)                   -- b's share is 1: earns 6
    assert.equal(6, a:tokens())
  end)

  it("keeps a full budget full with one read and no write, and a long "
     .. "run of successes with one read in 16", function()
    local dict = new_dict()
    local b = budget.recommended { shared = dict }
    for _ = 1, 160 do b:record(true, 1) end
    assert.equal(0, dict.incrs)
    assert.equal(10, dict.gets)           -- s starts at 1: quiet
    b:record(false, 1)                    -- s = 0.995: a read each time
    local gets = dict.gets
    for _ = 1, 100 do b:record(true, 1) end
    assert.equal(gets + 100, dict.gets)
    for _ = 1, 1600 do b:record(true, 1) end   -- s climbs past 0.999
    assert.equal(0, dict.incrs)
    gets = dict.gets
    for _ = 1, 160 do b:record(true, 1) end
    assert.equal(gets + 10, dict.gets)    -- one read per 16 successes
    assert.equal(8, b:tokens())
  end)

  it("ends the shortcut at its own failure or withdrawal, and repays "
     .. "another worker's withdrawal at the next read", function()
    local dict = new_dict()
    local a = budget.recommended { shared = dict }
    local b = budget.recommended { shared = dict }
    for _ = 1, 2000 do a:record(true, 1) end        -- a: quiet, full
    assert.is_true(b:withdraw())                    -- b takes one
    assert.equal(7, a:tokens())
    for _ = 1, 16 do a:record(true, 1) end          -- a reads again
    assert.equal(8, a:tokens())
    assert.is_true(a:withdraw())                    -- a's own: no skip
    a:record(true, 1)
    assert.equal(8, a:tokens())
    a:record(false, 1)
    assert.is_true(b:withdraw())
    a:record(true, 1)                               -- read: earns
    assert.equal(8, a:tokens())
  end)
end)
