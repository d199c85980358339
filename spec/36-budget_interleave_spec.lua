-- Shared budgets under every interleaving of the workers of a host:
-- each worker is a coroutine with its own budget object on one fake
-- ngx.shared dict, and yields after every dict:incr, so the specs choose
-- the order of every atomic step (nginx workers are processes that never
-- yield between two dict calls of their own, so this is harsher).  The
-- guarantees of doc/budget.md ("Interleavings") are checked after every
-- step and at the end.

local budget = require "backoff.budget"
local new_dict = dofile("spec/budget_dict.lua")

local rng = require("spec.helpers").park_miller  -- the same stream on every Lua

-- run `workers` coroutines; body(worker, rand) does the work; after each
-- step check() runs.  Returns when every worker is done.
local function interleave(seed, dict, workers, body, check)
  local rand = rng(seed)
  dict.on_incr = function() coroutine.yield() end
  local live = {}
  for w = 1, workers do
    live[w] = coroutine.create(function() body(w, rand) end)
  end
  while #live > 0 do
    local i = rand(#live)
    local ok, err = coroutine.resume(live[i])
    assert(ok, err)
    if coroutine.status(live[i]) == "dead" then table.remove(live, i) end
    check()
  end
  dict.on_incr = nil
end

describe("shared earned (the recommended rule) under interleavings",
  function()
  it("never grants more than the reserve plus what successes earned; "
     .. "ends within [0, capacity]", function()
    local runs, refused = 0, 0
    for seed = 1, 120 do
      local dict = new_dict()
      local objs, taken, earned = {}, 0, 0
      for w = 1, 3 do
        -- no credit: the counter is the capacity (the credit, lent for
        -- recoveries, moves the floor as R does: below).  A clock of its
        -- own, standing still: the run is about the order of the dict's
        -- calls, and a slice left behind on the machine's clock would
        -- have check()'s tokens() flush this worker's counts from
        -- outside its coroutine
        objs[w] = budget.earned { shared = dict, capacity = 4, earn = 2,
                                  per_recovery = 0,
                                  clock = function() return 50 end }
      end
      local key = objs[1]:dict_key()
      interleave(seed, dict, 3, function(w, rand)
        local b = objs[w]
        for _ = 1, 25 do
          local r = rand(4)
          if r == 1 then
            -- the success share before this success, as record uses it
            earned = earned + math.floor(2000 * b:success_share() + 0.5)
            b:record(true, 2)
          elseif b:withdraw() then
            taken = taken + 1000
          else
            refused = refused + 1
          end
          if r == 4 then b:record(false, 2) end
        end
      end, function()
        local t = objs[1]:tokens()
        assert(t >= 0 and t <= 4, "tokens() out of range")
        assert(taken <= 4000 + earned, "overdrawn")
      end)
      local v = dict.data[key] or 4000
      assert.is_true(v <= 4000, "above capacity at rest: " .. v)
      assert.is_true(v >= -4000, "a debt beyond one amount: " .. v)
      runs = runs + 1
    end
    assert.equal(120, runs)
    assert.is_true(refused > 0)
  end)
end)

describe("shared recommended: the reserve under interleavings", function()
  it("grants a dead upstream at most the reserve of all the counts; "
     .. "the counts are exact once flushed", function()
    local refused = 0
    for seed = 1, 100 do
      local dict = new_dict()
      local t = 100.5
      local clk = function() return t end
      local objs = {}
      for w = 1, 3 do
        objs[w] = budget.recommended { shared = dict, clock = clk }
      end
      local key = objs[1]:dict_key()
      -- what the workers counted: requests, and failures a success ended
      local requests, ended, granted = 0, 0, 0
      local fails = { 0, 0, 0 }
      -- (and the credit of the recoveries a worker confirmed: a run of
      -- 3 failed requests and seconds of successes happen in some
      -- interleavings, each worker's requests far apart on the clock)
      local function reserve()
        local lent = 0
        for k, v in pairs(dict.data) do
          if k:sub(-2) == ":r" then lent = lent + v / 1000 end
        end
        return math.min(8, math.max(1, 0.08 * requests + 2 * ended)) + lent
      end
      -- half failing, nothing withdrawn: the counter stays full
      interleave(seed, dict, 3, function(w, rand)
        for _ = 1, 12 do
          t = t + 0.01 * rand(10)
          local ok = rand(2) == 1
          requests = requests + 1
          objs[w]:record(ok, 1)
          -- a run counts at most 4 failures (4 x 2 = the capacity)
          if ok then ended, fails[w] = ended + math.min(4, fails[w]), 0
          else fails[w] = fails[w] + 1 end
        end
      end, function() end)
      -- dead: nothing is earned, no run ends; every count stays within
      -- the 10 s span, so no worker's R is above the reserve of all the
      -- counts made so far
      interleave(seed + 1000, dict, 3, function(w, rand)
        for _ = 1, 10 do
          t = t + 0.01 * rand(10)
          requests = requests + 1
          objs[w]:record(false, 1)
          if objs[w]:withdraw() then
            granted = granted + 1
            objs[w]:record(false, 2)
          else
            refused = refused + 1
          end
        end
      end, function()
        assert(t < 110, "the span")
        assert(granted <= math.floor(reserve() + 1e-9), "overdrawn")
      end)
      -- a withdrawal flushes: then the slices hold every count exactly
      for w = 1, 3 do objs[w]:withdraw() end
      local sum = 0
      for k, v in pairs(dict.data) do   -- the reserve's slices (not the
        -- credit's, nor the attempts and timeouts counted for the price
        -- of a timeout)
        if k ~= key and not k:find(":[art]$") then sum = sum + v end
      end
      assert.equal(80 * requests + 2000 * ended, sum)
      -- the counter's size: the capacity and what the credit may lend
      local size = (8 + 2 ^ 20) * 1000
      local v = dict.data[key] or size
      assert.is_true(v <= size and v >= size - 8000 - 2 * 6000,
                     "at rest: " .. v)
    end
    assert.is_true(refused > 0)
  end)
end)

describe("shared recommended: the credit under interleavings", function()
  it("lends exactly the recoveries each worker confirmed, and a dead "
     .. "upstream after them gets at most the largest reserve a worker "
     .. "computed", function()
    for seed = 1, 60 do
      local dict = new_dict()
      local t = 500.25
      local clk = function() return t end
      local objs = {}
      for w = 1, 3 do
        objs[w] = budget.recommended { shared = dict, clock = clk }
      end
      -- down: 4 failed requests each (a run long enough to lend for);
      -- then up: successes for 3 s each, well past a slice and 3/4 of
      -- the down spell (a recovery is confirmed once the upstream has
      -- answered that long: down and up are two interleavings, so that
      -- no worker's run lasts through another's up spell)
      interleave(seed, dict, 3, function(w, rand)
        local b = objs[w]
        for _ = 1, 4 do
          t = t + 0.01 * rand(5)
          b:record(false, 1)
          if b:withdraw() then b:record(false, 2) end
        end
      end, function() end)
      interleave(seed + 250, dict, 3, function(w, rand)
        local b = objs[w]
        for _ = 1, 10 do
          t = t + 0.1 * rand(5)
          b:record(true, 1)
        end
      end, function() end)
      local lent = 0
      for k, v in pairs(dict.data) do
        if k:sub(-2) == ":r" then lent = lent + v end
      end
      assert.equal(3 * 4 * 5000, lent)
      -- dead, within the span of the credit
      t = t + 0.01
      assert.is_true(objs[1]:credit() > 0)
      local granted, most = 0, 0
      interleave(seed + 500, dict, 3, function(w, rand)
        local b = objs[w]
        for _ = 1, 40 do
          t = t + 0.001 * rand(5)
          b:record(false, 1)
          most = math.max(most, b:reserve())
          if b:withdraw() then
            granted = granted + 1
            b:record(false, 3)
          end
        end
      end, function()
        assert(granted <= math.floor(most + 1e-9), "overdrawn")
      end)
      assert.is_true(granted > 0)
    end
  end)
end)

describe("shared grpc under interleavings", function()
  -- a success's take-back computed before other workers' failures can
  -- leave a debt below 0 (later successes repay it): at most one
  -- token_ratio per other worker
  it("stays an exact count, at rest at most max, a debt of at most "
     .. "(workers - 1) x token_ratio", function()
    local debts = 0
    for seed = 1, 120 do
      local dict = new_dict()
      local objs = {}
      for w = 1, 3 do
        objs[w] = budget.grpc { shared = dict, max_tokens = 3,
                                token_ratio = 1.5 }
      end
      local key = objs[1]:dict_key()
      interleave(seed, dict, 3, function(w, rand)
        for _ = 1, 20 do objs[w]:record(rand(3) == 1, 1) end
      end, function()
        local t = objs[1]:tokens()
        assert(t >= 0 and t <= 3, "tokens() out of range")
      end)
      local v = dict.data[key] or 3000
      assert.is_true(v >= -2 * 1500 and v <= 3000, "at rest: " .. v)
      assert.equal(0, v % 500)          -- only -1000 and +1500 steps
      if v < 0 then debts = debts + 1 end
    end
    assert.is_true(debts < 120)         -- a debt needs a rare race
  end)

  it("is the serial result when the workers take turns", function()
    local dict = new_dict()
    local a = budget.grpc { shared = dict, max_tokens = 4,
                            token_ratio = 1.6 }
    local b = budget.grpc { shared = dict, max_tokens = 4,
                            token_ratio = 1.6 }
    local model, max = 4000, 4000
    local rand = rng(9)
    for _ = 1, 500 do
      local x = rand(2) == 1 and a or b
      if rand(3) == 1 then
        x:record(true)
        model = math.min(max, model + 1600)
      else
        x:record(false)
        model = math.max(0, model - 1000)
      end
      assert.equal(model / 1000, a:tokens())
    end
  end)
end)

describe("shared token bucket with deposits of 2^53", function()
  it("stays exact and within capacity under interleavings", function()
    for seed = 1, 60 do
      local dict = new_dict()
      local objs = {}
      for w = 1, 3 do
        objs[w] = budget { shared = dict, capacity = 10, cost = 5 }
      end
      local key = objs[1]:dict_key()
      interleave(seed, dict, 3, function(w, rand)
        for _ = 1, 15 do
          if rand(2) == 1 then objs[w]:deposit(2 ^ 53)
          else objs[w]:withdraw() end
        end
      end, function()
        local v = dict.data[key]
        -- exact integers; in flight, each of the 3 workers holds at most
        -- one amount (a deposit is clamped to capacity 10, a cost is 5)
        -- and an earlier take-back may have left a debt of one amount
        -- per other worker
        assert(v == nil or (v == math.floor(v) and v >= -3 * 10 - 2 * 10
                            and v <= 4 * 10), "counter " .. tostring(v))
      end)
      local v = dict.data[key] or 10
      assert.is_true(v <= 10 and v >= -2 * 10, "at rest: " .. v)
    end
  end)
end)

describe("shared ratio under interleavings", function()
  it("never lets the retries exceed percent of the requests plus the "
     .. "reserve", function()
    local refused = 0
    for seed = 1, 80 do
      local dict = new_dict()
      local objs, req, ret = {}, 0, 0
      for w = 1, 3 do
        objs[w] = budget.ratio { shared = dict, window = 10, percent = 50,
          min_per_second = 0.2, clock = function() return 100 end }
      end
      interleave(seed, dict, 3, function(w, rand)
        for _ = 1, 20 do
          if rand(3) == 1 then
            req = req + 1
            objs[w]:record(true, 1)
          elseif objs[w]:withdraw() then
            ret = ret + 1
          else
            refused = refused + 1
          end
        end
      end, function()
        -- reserve 0.2 x 10 = 2 retries, and 50% of the requests
        assert(ret <= 2 + req * 0.5 + 1e-9, "overdrawn")
      end)
    end
    assert.is_true(refused > 0)
  end)
end)

describe("shared adaptive under interleavings", function()
  it("counts every attempt and every refused retry exactly once",
     function()
    for seed = 1, 60 do
      local dict = new_dict()
      local objs, attempts, accepts, refused = {}, 0, 0, 0
      for w = 1, 3 do
        local rand = rng(seed * 3 + w)
        objs[w] = budget.adaptive { shared = dict, window = 60,
          clock = function() return 7 end,
          random = function() return (rand(1000) - 1) / 1000 end }
      end
      interleave(seed, dict, 3, function(w, rand)
        for _ = 1, 20 do
          local ok = rand(4) == 1
          objs[w]:record(ok, 1)
          attempts = attempts + 1
          if ok then accepts = accepts + 1 end
          if not objs[w]:withdraw() then refused = refused + 1 end
        end
      end, function() end)
      local r, a = objs[1]:counts()
      assert.equal(attempts + refused, r)
      assert.equal(accepts, a)
    end
  end)
end)
