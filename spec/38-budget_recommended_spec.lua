-- The recommended setting, budget.recommended(): its rule (doc/budget.md,
-- "The recommended setting") checked call for call against a model
-- written from the rule's text, and the properties the figures of
-- bench/outage.lua rest on.  Time is a fake clock.

local budget = require "backoff.budget"
local new_dict = dofile("spec/budget_dict.lua")

local rng = require("spec.helpers").park_miller  -- the same stream on every Lua

-- a clock the specs move by hand
local function clock(t0)
  local c = { t = t0 or 1000 }
  c.now = function() return c.t end
  return c
end

-- The rule, in thousandths of a token, written from doc/budget.md:
-- * R = B + L.  B = 80 per request (first attempt) + 2000 per failure
--   that a success ended (this state's failures since its last
--   success, at most 4 of them: 4 x 2000 is the capacity), counted in
--   1-second slices; the sum of the current slice and the 9 before it,
--   at least 1000, at most 8000.  L = 5000 per failed request of a
--   recovery: a run of at least 3 failed requests (first attempts
--   failed since this state's last success) that a success ended,
--   followed by at least 3 successes and no failure until the clock is
--   max(2, ceil(0.75 x D)) slices past the one of the success that
--   ended it, D the slices from the run's first failed request to its
--   last (up for 3/4 of the time it was down); counted in that slice,
--   summed over the span as B.
-- * the counter starts at SIZE = 8000 + 2^20 x 1000; a retry takes 1000
--   when it leaves the counter >= SIZE - R, and a request's first retry
--   (attempt 2: the one after a failed first attempt) >= SIZE - R +
--   floor(L / 2); else it is refused; a success adds round(6000 x s),
--   s the moving average (weight 1/200) of the outcomes before it,
--   starting at 1; never above SIZE.
local SIZE = 8000 + 2 ^ 20 * 1000
local function model()
  local m = { t = SIZE, s = 1, fails = 0, slices = {}, lent = {},
              run = 0, ended = 0, streak = 0 }
  local function add(now, u, into)
    local i = math.floor(now)
    into[i] = (into[i] or 0) + u
  end
  local function sum(now, of)
    local i, s = math.floor(now), 0
    for j = i - 9, i do s = s + (of[j] or 0) end
    return s
  end
  function m.L(now) return sum(now, m.lent) end
  function m.R(now)
    return math.max(1000, math.min(8000, sum(now, m.slices))) + m.L(now)
  end
  function m.record(now, ok, attempt)
    local u = attempt == 1 and 80 or 0
    if ok then
      add(now, u + 2000 * m.fails, m.slices)
      m.fails = 0
      if m.run > 0 then
        m.ended = m.run >= 3 and m.run or 0
        m.run, m.streak, m.since = 0, 1, math.floor(now)
        m.up = math.max(2, math.ceil(0.75 * (m.rl - m.rs)))
      elseif m.ended > 0 then
        m.streak = m.streak + 1
        if m.streak >= 3 and math.floor(now) - m.since >= m.up then
          add(now, 5000 * m.ended, m.lent)
          m.ended = 0
        end
      end
      m.t = math.min(SIZE, m.t + math.floor(6000 * m.s + 0.5))
      m.s = m.s + (1 - m.s) / 200
    else
      add(now, u, m.slices)
      m.fails = math.min(4, m.fails + 1)
      m.ended = 0
      if attempt == 1 then
        if m.run == 0 then m.rs = math.floor(now) end
        m.rl = math.floor(now)
        m.run = m.run + 1
      end
      m.s = m.s - m.s / 200
    end
  end
  function m.withdraw(now, attempt)
    local fl = SIZE - m.R(now)
    if attempt <= 2 then fl = fl + math.floor(m.L(now) / 2) end
    if m.t - 1000 < fl then return false end
    m.t = m.t - 1000
    return true
  end
  function m.tokens(now)
    local r = m.R(now)
    return math.max(0, math.min(r, m.t - (SIZE - r)))
  end
  return m
end

-- n requests over `seconds`, all succeeding at once
local function healthy(b, c, n, seconds)
  for _ = 1, n do
    c.t = c.t + seconds / n
    b:record(true, 1)
  end
end

for _, where in ipairs { "in-process", "shared" } do
  local function make(c)
    if where == "shared" then
      return budget.recommended { shared = new_dict(), key = "api",
                                  clock = c.now }
    end
    return budget.recommended { clock = c.now }
  end

  describe("budget.recommended (" .. where .. ")", function()
    it("has the documented settings, and a reserve of 1 before any "
       .. "traffic", function()
      local b = make(clock())
      assert.equal(8, b:capacity())
      assert.equal(1, b:cost())
      assert.equal(6, b:earn())
      assert.equal(200, b:memory())
      assert.equal(9, b:throttle_cost())
      assert.equal(6, b:timeout_cost())
      assert.equal(0.08, b:per_request())
      assert.equal(2, b:per_failure())
      assert.equal(5, b:per_recovery())
      assert.equal(10, b:span())
      assert.equal(1, b:reserve())
      assert.equal(0, b:credit())
      assert.equal(1, b:tokens())
      assert.equal(1, b:success_share())
    end)

    it("follows the rule call for call over mixed outcomes and rates",
       function()
      -- failures 1 in 2 .. 1 in 10, all of them, and flapping (blocks
      -- of 60 attempts down, 60 up); gaps of 0.05 to 3 s
      local lent = 0
      for _, fail_in in ipairs { 2, 3, 5, 10, 0, -1 } do
        local c = clock(5000.25)
        local b, m = make(c), model()
        local rand = rng(fail_in + 7)
        local granted, refused = 0, 0
        local attempt = 1
        for i = 1, 4000 do
          local gap = ({ 0.05, 0.2, 0.5, 1, 3 })[rand(5)]
          if i % 400 < 40 then gap = 0.01 end     -- bursts
          c.t = c.t + gap
          local ok
          if fail_in == 0 then ok = i < 300
          elseif fail_in == -1 then ok = i % 120 < 60
          else ok = rand(fail_in) == 1 end
          b:record(ok, attempt)
          m.record(c.t, ok, attempt)
          local tried = attempt
          attempt = 1
          if not ok then
            local want = m.withdraw(c.t, tried + 1)
            assert.equal(want, b:withdraw(), "call " .. i)
            if want then
              granted = granted + 1
              attempt = 2
            else
              refused = refused + 1
            end
          end
          assert.is_true(math.abs(b:reserve() - m.R(c.t) / 1000) < 1e-9,
                         "reserve, call " .. i)
          assert.is_true(math.abs(b:tokens() - m.tokens(c.t) / 1000)
                         < 1e-9, "tokens, call " .. i)
          assert.is_true(math.abs(b:success_share() - m.s) < 1e-12)
          assert.is_true(math.abs(b:credit() - m.L(c.t) / 1000) < 1e-9)
          lent = math.max(lent, b:credit())
        end
        assert.is_true(granted > 0 and refused > 0)
      end
      assert.is_true(lent > 0, "a recovery was lent for")
    end)

    it("sizes the reserve by the requests of the last 10 s: 8% of them, "
       .. "at least 1, at most 8", function()
      for _, case in ipairs { { 1, 1 }, { 2, 1.6 }, { 5, 4 }, { 8, 6.4 },
                              { 10, 8 }, { 50, 8 } } do
        local rate, want = case[1], case[2]
        local c = clock()
        local b = make(c)
        healthy(b, c, 60 * rate, 60)            -- a minute at `rate`/s
        -- the last slice is only starting: 9 whole seconds and a bit
        c.t = math.floor(c.t) + 0.999
        healthy(b, c, 0, 0)
        local r = b:reserve()
        assert.is_true(math.abs(r - want) <= 0.08 * rate + 1e-9,
          ("rate %d: reserve %s, want about %s"):format(rate, r, want))
        assert.equal(r, b:tokens())
      end
    end)

    it("grants a dead upstream the reserve it found, then nothing", function()
      for _, rate in ipairs { 1, 2, 5, 10, 20 } do
        local c = clock(77.5)
        local b = make(c)
        healthy(b, c, 30 * rate, 30)
        local first, most = b:reserve(), 0
        local granted = 0
        for _ = 1, 60 * rate do                 -- a minute, dead
          c.t = c.t + 1 / rate
          b:record(false, 1)
          -- the requests keep coming: R moves by one request's 0.08
          most = math.max(most, b:reserve())
          if b:withdraw() then
            granted = granted + 1
            b:record(false, 2)
          end
        end
        assert.is_true(granted >= math.floor(first)
                       and granted <= math.floor(most), "rate " .. rate)
        -- at most 8% of the requests of 10 s (or 1)
        assert.is_true(granted <= math.max(1, 0.08 * 10 * rate) + 1e-9)
        assert.is_true(b:tokens() < 1)          -- less than a retry left
      end
    end)

    it("adds 2 per failure that a success ended, for 10 s", function()
      local c = clock()
      local b = make(c)
      assert.equal(1, b:reserve())
      b:record(false, 1)                        -- a request: +0.08
      assert.is_true(b:withdraw())
      b:record(false, 2)
      assert.is_false(b:withdraw())             -- the reserve is 1
      c.t = c.t + 0.5
      b:record(true, 1)                         -- ends 2 failures: +4
      assert.equal(4.16, b:reserve())
      c.t = c.t + 9                             -- still in the span
      assert.equal(4.16, b:reserve())
      c.t = c.t + 1                             -- the slice has left it
      assert.equal(1, b:reserve())
    end)

    it("retries freely at 50% failures once warm", function()
      local c = clock()
      local b = make(c)
      local rand = rng(50)
      local refused, failures = 0, 0
      for _ = 1, 20000 do
        c.t = c.t + 0.25                        -- 4 attempts per second
        local ok = rand(2) == 1
        b:record(ok, 1)
        if not ok then
          failures = failures + 1
          if not b:withdraw() then refused = refused + 1 end
        end
      end
      -- a refusal needs 8 failures in a row: about 2^-8 of them
      assert.is_true(refused < failures / 100, "refused " .. refused)
      assert.is_true(math.abs(b:success_share() - 0.5) < 0.15)
    end)

    it("at 80% failures grants about 1.2 retries per success", function()
      local c = clock()
      local b = make(c)
      local rand = rng(80)
      for _ = 1, 2000 do
        c.t = c.t + 0.1
        b:record(rand(5) == 1, 1)               -- warm up
      end
      local successes, granted = 0, 0
      for _ = 1, 20000 do
        c.t = c.t + 0.1
        local ok = rand(5) == 1
        if ok then successes = successes + 1 end
        b:record(ok, 1)
        if not ok and b:withdraw() then granted = granted + 1 end
      end
      local per = granted / successes
      assert.is_true(per > 1.0 and per < 1.4, "retries per success " .. per)
    end)

    it("never grants a retry after an overload answer", function()
      local c = clock()
      local b = make(c)
      healthy(b, c, 200, 10)
      assert.equal(8, b:tokens())
      assert.is_false(b:allows(b:throttle_cost()))
      assert.is_false(b:withdraw(b:throttle_cost()))
      assert.equal(8, b:tokens())
    end)

    it("does not depend on the clock's origin", function()
      local decisions = {}
      for k, t0 in ipairs { 0, 1e9, -86400 * 365, 3.5, -1e6 + 0.25 } do
        local c = clock(t0)
        local b = make(c)
        local rand = rng(11)
        local out = {}
        for _ = 1, 3000 do
          -- steps exact in binary: the same sums at every origin (0.1
          -- and 0.3 put 1e9 + their sums on other sides of a slice's
          -- edge than 0 + them: float rounding, not the rule)
          c.t = c.t + ({ 0.125, 0.25, 1 })[rand(3)]
          local ok = rand(3) == 1
          b:record(ok, 1)
          if not ok then out[#out + 1] = b:withdraw() and 1 or 0 end
        end
        decisions[k] = table.concat(out)
      end
      -- origins a whole number of slices apart: the same decisions
      assert.equal(decisions[1], decisions[2])
      assert.equal(decisions[1], decisions[3])
      -- others move the slices' edges: the same rule, other counts
      assert.equal(#decisions[1], #decisions[4])
      assert.equal(#decisions[1], #decisions[5])
    end)

    it("takes a clock that goes back as no time passed, and refuses one "
       .. "that returns NaN, an infinity or a string", function()
      local c = clock()
      local b = make(c)
      healthy(b, c, 100, 10)
      local r = b:reserve()
      c.t = c.t - 3600
      assert.equal(r, b:reserve())
      for _, v in ipairs { 0 / 0, math.huge, -math.huge, "soon" } do
        c.t = v
        local ok, err = pcall(b.withdraw, b)
        assert.is_false(ok)
        assert.matches("backoff.budget.recommended: option 'clock' "
                       .. "must return a finite number (got", err, 1, true)
      end
    end)
  end)
end

describe("budget.recommended shared by workers", function()
  it("shares the tokens and the counts; each worker keeps its own "
     .. "success share and run of failures", function()
    local dict, c = new_dict(), clock()
    local a = budget.recommended { shared = dict, clock = c.now }
    local b = budget.recommended { shared = dict, clock = c.now }
    c.t = 1000
    healthy(a, c, 50, 0.5)               -- 50 requests in one second: +4
    c.t = c.t + 1                        -- a's counts are still a's own
    assert.equal(1, b:reserve())
    healthy(a, c, 1, 0)                  -- a's next slice: flushed
    c.t = c.t + 1
    assert.equal(4, b:reserve())
    for _ = 1, 4 do assert.is_true(a:withdraw()) end
    assert.is_false(b:withdraw())
    a:record(false, 2)
    assert.is_true(a:success_share() < 1)
    assert.equal(1, b:success_share())
    b:record(true, 1)                    -- b's share is 1: earns 6
    -- a's request of the last second (a moved on: written), b's own;
    -- a's failure is not b's to end
    assert.equal(4.16, b:reserve())
    assert.equal(4.16, b:tokens())
    a:record(true, 2)                    -- ends a's failure: +2, at once
    assert.equal(6.16, b:reserve())
  end)

  it("keeps a full budget full with one read and no write, a long run "
     .. "of successes with one read in 16, and one incr per second of "
     .. "requests", function()
    local dict, c = new_dict(), clock()
    local b = budget.recommended { shared = dict, clock = c.now }
    for _ = 1, 160 do b:record(true, 1) end    -- one slice
    assert.equal(0, dict.incrs)
    assert.equal(10, dict.gets)           -- s starts at 1: quiet
    b:record(false, 1)                    -- s = 0.995: a read each time
    local gets = dict.gets
    for _ = 1, 100 do b:record(true, 1) end   -- the first ends the run:
    assert.equal(gets + 100, dict.gets)
    assert.equal(1, dict.incrs)               -- its counts written at once
    for _ = 1, 1600 do b:record(true, 1) end   -- s climbs past 0.999
    assert.equal(1, dict.incrs)
    gets = dict.gets
    for _ = 1, 160 do b:record(true, 1) end
    assert.equal(gets + 10, dict.gets)    -- one read per 16 successes
    for _ = 1, 10 do                      -- 10 seconds, 16 requests each
      c.t = c.t + 1
      for _ = 1, 16 do b:record(true, 1) end
    end
    -- each second's counts: one incr (the attempts of the slice with
    -- the failure, written when the clock leaves it: one more, once;
    -- for the share of timeouts); and the run of failed requests
    -- before is too short to be lent for (a recovery needs 3)
    assert.equal(12, dict.incrs)
    assert.equal(8, b:tokens())
  end)

  it("ends the shortcut at its own failure or withdrawal, and repays "
     .. "another worker's withdrawal at the next read", function()
    local dict, c = new_dict(), clock()
    local a = budget.recommended { shared = dict, clock = c.now }
    local b = budget.recommended { shared = dict, clock = c.now }
    for _ = 1, 2000 do a:record(true, 1) end        -- a: quiet, full
    assert.is_true(a:withdraw())                    -- flushes a's counts
    for _ = 1, 16 do a:record(true, 1) end
    assert.equal(8, a:tokens())
    for _ = 1, 2000 do a:record(true, 1) end        -- quiet again
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
