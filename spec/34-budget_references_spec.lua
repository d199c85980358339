-- The budget kinds against the rules of their references, call for
-- call: gRPC's retry throttling (gRFC A6, as gRPC's own
-- ServerRetryThrottleData keeps it), the AWS SDKs' standard retry quota
-- with its per-error cost, Finagle's RetryBudget and the SRE book's
-- adaptive throttling.  Each reference is written here from its rules,
-- and every decision and count of the budget must match it.

local backoff = require "backoff"
local budget = require "backoff.budget"
local new_dict = dofile("spec/budget_dict.lua")

local lcg = require("spec.helpers").park_miller  -- the same stream on every Lua

local function both(make)       -- in-process and shared
  return { { "in-process", function(o) return make(o) end },
           { "shared", function(o)
               o.shared = new_dict()
               return make(o)
             end } }
end

------------------------------------------------------------------------
-- gRFC A6

-- gRPC reads tokenRatio from the JSON text: the whole part x 1000 plus
-- the first 3 decimals (the rest dropped, not rounded); 0 is refused.
-- The text of a Lua number is its shortest exact decimal form.
local function grpc_milli_ratio(x)
  local text
  for digits = 0, 20 do
    text = ("%." .. digits .. "f"):format(x)
    if tonumber(text) == x then break end
  end
  local whole, decimals = text:match("^(%d+)%.?(%d*)$")
  return tonumber(whole) * 1000 + tonumber((decimals .. "000"):sub(1, 3))
end

-- gRPC's rule in milli-tokens: failure -1000 clamped at 0, then a
-- retry is allowed iff the count is > max / 2 (integer division);
-- success +ratio clamped at max
local function a6_model(max_tokens, ratio)
  local max, r = max_tokens * 1000, grpc_milli_ratio(ratio)
  local m = { t = max }
  function m.failure()
    m.t = math.max(0, m.t - 1000)
    return m.t > math.floor(max / 2)
  end
  function m.success() m.t = math.min(max, m.t + r) end
  return m
end

for _, w in ipairs(both(budget.grpc)) do
  describe("budget.grpc (" .. w[1] .. ") against gRFC A6", function()
    it("follows gRPC's own test of the throttle, call for call",
       function()
      -- max 4 tokens (threshold 2), each failure -1, each success +1.6
      local b = w[2] { max_tokens = 4, token_ratio = 1.6 }
      local steps = {
        { false, true, 3 }, { true, nil, 4 },     -- not beyond max
        { false, true, 3 }, { false, false, 2 },  -- at the threshold: no
        { false, false, 1 }, { false, false, 0 },
        { false, false, 0 },                      -- not below 0
        { true, nil, 1.6 }, { true, nil, 3.2 },
        { false, true, 2.2 }, { false, false, 1.2 },
        { true, nil, 2.8 }, { false, false, 1.8 },
        { true, nil, 3.4 }, { false, true, 2.4 },
      }
      for i, s in ipairs(steps) do
        b:record(s[1], 1)
        if s[2] ~= nil then
          assert.equal(s[2], b:allows(), "step " .. i)
          assert.equal(s[2], b:withdraw(), "step " .. i)
        end
        assert.is_true(math.abs(b:tokens() - s[3]) < 1e-9,
          ("step %d: %s tokens, want %s"):format(i, b:tokens(), s[3]))
      end
    end)

    it("matches the rule over 3000 random outcomes, several settings",
       function()
      for _, cfg in ipairs { { 10, 0.1 }, { 4, 1.6 }, { 3, 0.5 },
                             { 10, 0.0995 }, { 7, 0.3337 },
                             { 100, 0.25 }, { 1, 1 } } do
        local rand = lcg(cfg[1] * 7 + 1)
        local b = w[2] { max_tokens = cfg[1], token_ratio = cfg[2] }
        local m = a6_model(cfg[1], cfg[2])
        for i = 1, 3000 do
          if rand(3) == 1 then
            b:record(true, rand(3))
            m.success()
          else
            b:record(false, rand(3))
            local allowed = m.failure()
            assert.equal(allowed, b:withdraw(), "call " .. i)
          end
          assert.equal(m.t / 1000, b:tokens())
        end
      end
    end)

    it("keeps token_ratio to 3 decimals, truncated as gRPC does",
       function()
      local b = w[2] { max_tokens = 10, token_ratio = 0.1234 }
      assert.equal(0.123, b:token_ratio())
      for _ = 1, 3 do b:record(false) end
      b:record(true)
      assert.equal(7.123, b:tokens())
      assert.equal(10, b:max_tokens())
      -- gRPC drops the digits beyond the third: 0.0995 is 0.099 (it was
      -- rounded to 0.1 here), 1.9999 is 1.999
      for _, x in ipairs { 0.0995, 1.9999, 0.0019, 1.001, 1.005, 0.557,
                           2.675, 999.9999, 0.001, 1000 } do
        local g = w[2] { max_tokens = 10, token_ratio = x }
        assert.equal(grpc_milli_ratio(x) / 1000, g:token_ratio(),
                     tostring(x))
      end
      assert.equal(0.099, w[2] { token_ratio = 0.0995 }:token_ratio())
    end)

    it("refuses a token_ratio gRPC refuses (0 thousandths: it would "
       .. "never refill)", function()
      for _, x in ipairs { 0.0004, 0.0009999, 1e-5 } do
        local ok, err = pcall(w[2], { max_tokens = 10, token_ratio = x })
        assert.is_false(ok, tostring(x))
        assert.truthy(err:find("backoff.budget.grpc: option 'token_ratio' "
          .. "must be a number >= 0.001 and <= 1000", 1, true), err)
      end
      -- the smallest ratio gRPC takes refills: a million successes
      -- bring 6 failures' worth back
      local b = w[2] { max_tokens = 10, token_ratio = 0.001 }
      for _ = 1, 6 do b:record(false) end
      assert.is_false(b:withdraw())
      for _ = 1, 6000 do b:record(true) end
      assert.is_true(b:withdraw())
    end)
  end)
end

------------------------------------------------------------------------
-- AWS standard mode

-- The SDKs' retry quota (aws-sdk-js-v3 defaultRetryQuota, botocore's
-- standard mode): 500 tokens; a retry needs its cost (10 after a
-- timeout, 5 otherwise) and takes it; a success after retries gives
-- back the cost of the retry that succeeded, a success at the first
-- attempt gives 1; never above 500.
local function aws_model()
  local m = { t = 500 }
  function m.cost(err) return err == "timeout" and 10 or 5 end
  function m.retrieve(err)
    local c = m.cost(err)
    if c > m.t then return nil end
    m.t = m.t - c
    return c
  end
  function m.release(c) m.t = math.min(500, m.t + (c or 1)) end
  return m
end

for _, w in ipairs(both(budget)) do
  describe("budget{} with budget.aws_cost (" .. w[1] .. ") against AWS "
           .. "standard mode", function()
    it("decides every retry and counts every token as the SDKs do",
       function()
      local b = w[2] {}
      local m = aws_model()
      local rand = lcg(18)
      local policy = backoff.constant { delay = 0, max_attempts = 4 }
      local nosleep = function() end
      local reasons = {}
      for call = 1, 400 do
        -- each attempt: success, a timeout or a 503, at random
        local outcomes = {}
        for a = 1, 4 do
          local r = rand(10)
          outcomes[a] = r <= 3 and true or r <= 6 and "timeout" or "503"
        end
        local res, _, reason = backoff.retry(policy, function(a)
          if outcomes[a] == true then return "ok" end
          return nil, outcomes[a]
        end, { budget = b, retry_cost = budget.aws_cost, sleep = nosleep })
        reasons[reason or "ok"] = (reasons[reason or "ok"] or 0) + 1
        -- the same call in the SDKs' terms
        local paid, want
        for a = 1, 4 do
          if outcomes[a] == true then
            m.release(paid)
            want = "ok"
            break
          end
          if a == 4 then break end
          paid = m.retrieve(outcomes[a])
          if not paid then break end
        end
        assert.equal(want, res, "call " .. call)
        assert.equal(m.t, b:tokens(), "call " .. call)
      end
      -- the quota ran dry and refilled: both paths were taken
      assert.is_true(reasons.budget > 20 and reasons.ok > 100
                     and reasons.max_attempts > 5)
    end)

    it("takes nothing when the quota is short", function()
      local b = w[2] { capacity = 12 }
      assert.is_true(b:withdraw(budget.aws_cost("timeout")))
      assert.is_false(b:allows(budget.aws_cost("timeout")))
      assert.is_false(b:withdraw(budget.aws_cost("timeout")))
      assert.equal(2, b:tokens())
      assert.is_false(b:withdraw(budget.aws_cost("HTTP 503")))
      assert.equal(2, b:tokens())
    end)
  end)
end

describe("budget.aws_cost and budget.is_timeout", function()
  it("cost 10 for a timeout, 5 for anything else", function()
    for _, e in ipairs { "timeout", "connect timeout", "read timed out",
                         { timeout = true }, { err = "timeout" } } do
      assert.equal(10, budget.aws_cost(e))
      assert.is_true(budget.is_timeout(e))
    end
    for _, e in ipairs { "closed", "HTTP 503", "timeouts here", 5, nil,
                         true, {}, { err = 5 }, { timeout = "yes" } } do
      assert.equal(5, budget.aws_cost(e))
      assert.is_false(budget.is_timeout(e))
    end
  end)
end)

------------------------------------------------------------------------
-- Finagle's RetryBudget

-- ttl seconds of deposits (1000 units per request) and withdrawals
-- (1000 / percent% units per retry), plus min_per_second x ttl
-- retries; a retry needs the balance to cover it
local function finagle_model(ttl, percent, minps)
  local unit = math.floor(100000 / percent)
  local m = { events = {}, reserve = minps * ttl * unit }
  local function balance(now)
    local s = m.reserve
    for _, e in ipairs(m.events) do
      if e[1] > now - ttl then s = s + e[2] end
    end
    return s
  end
  function m.request(now) m.events[#m.events + 1] = { now, 1000 } end
  function m.retry(now)
    if balance(now) >= unit then
      m.events[#m.events + 1] = { now, -unit }
      return true
    end
    return false
  end
  return m
end

for _, w in ipairs(both(budget.ratio)) do
  describe("budget.ratio (" .. w[1] .. ") against Finagle's RetryBudget",
    function()
    it("allows the same retries as the rule, over time", function()
      -- whole slices of time: the model and the window agree exactly
      local now = 0
      local b = w[2] { window = 10, percent = 20, min_per_second = 1,
                       clock = function() return now end }
      local m = finagle_model(10, 20, 1)
      local rand = lcg(5)
      local seen = {}
      for step = 1, 600 do
        now = step                       -- one second per step
        for _ = 1, rand(6) - 1 do
          b:record(true, 1)
          m.request(now)
        end
        for _ = 1, rand(6) - 1 do
          local want = m.retry(now)
          assert.equal(want, b:withdraw(), "second " .. step)
          seen[want] = true
        end
      end
      assert.is_true(seen[true] and seen[false])
    end)
  end)
end

------------------------------------------------------------------------
-- SRE adaptive throttling

for _, w in ipairs(both(budget.adaptive)) do
  describe("budget.adaptive (" .. w[1] .. ") against the SRE book",
    function()
    it("refuses with probability (requests - k accepts) / (requests + 1)",
       function()
      local draw = 0
      local b = w[2] { k = 2, window = 60, clock = function() return 5 end,
                       random = function() return draw end }
      -- 10 requests, 3 accepts: p = (10 - 6) / 11
      for i = 1, 10 do b:record(i <= 3, 1) end
      local p = 4 / 11
      assert.is_true(math.abs(b:tokens() - (1 - p)) < 1e-12)
      draw = p + 1e-9
      assert.is_true(b:withdraw())       -- draw >= p: allowed
      draw = p - 1e-9
      assert.is_false(b:withdraw())      -- refused: counted as a request
      assert.same({ 11, 3 }, { b:counts() })
      -- while accepts >= requests / k nothing is refused, whatever the draw
      local c = w[2] { k = 2, clock = function() return 5 end,
                       random = function() return 0 end }
      for i = 1, 10 do c:record(i % 2 == 0, 1) end
      assert.equal(1, c:tokens())
      assert.is_true(c:withdraw())
    end)
  end)
end
