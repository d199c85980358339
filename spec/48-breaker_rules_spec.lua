-- backoff.breaker, the rules of 0.3.0 (doc/breaker.md): the ratios met
-- exactly at their threshold, a success judged as a failure is, the
-- window's counts in state(), a seeded open interval, the state forced
-- by hand, the observe mode, half-open's bound, the recovery rule
-- (fast failing probes keep the interval short, hung ones lengthen it)
-- and the bounds that catch milliseconds.  A fake dict and clock:
-- spec/breaker_world.lua.
local backoff = require "backoff"
local breaker = require "backoff.breaker"
local metrics = require "backoff.metrics"
local stats = require "backoff.breaker.stats"

local world, make = dofile("spec/breaker_world.lua")

-- n outcomes of kind ok (seconds: how long each took)
local function rec(br, n, ok, seconds)
  for _ = 1, n do
    assert.is_true((br:allow()))
    br:record(ok, nil, seconds)
  end
end

-- the ratios tried: k/100, and a few that are no decimal: p/q
local RATIOS = {}
for k = 1, 100 do RATIOS[#RATIOS + 1] = { k, 100 } end
for _, pq in ipairs { { 1, 3 }, { 2, 3 }, { 1, 7 }, { 5, 7 }, { 1, 9 },
                      { 8, 9 }, { 3, 11 }, { 10, 11 }, { 1, 6 } } do
  RATIOS[#RATIOS + 1] = pq
end

-- the smallest count n with n / calls >= p / q, in integers
local function threshold(p, q, calls)
  return math.floor((p * calls + q - 1) / q)
end

describe("breaker ratios at the threshold", function()
  it("open at exactly the ratio: 55 failures of 100 at 0.55, 14 slow "
     .. "calls of 25 at 0.56", function()
    local w = world()
    local br = make(w, { failure_ratio = 0.55, min_calls = 100,
                         window = 3600, buckets = 1 })
    rec(br, 45, true)
    rec(br, 54, false)
    assert.equal("closed", (br:state()))
    rec(br, 1, false)
    assert.equal("open", (br:state()))
    local w2 = world()
    local slow = make(w2, { slow_call_duration = 1, slow_call_ratio = 0.56,
                            min_calls = 25, window = 3600, buckets = 1 })
    rec(slow, 11, true, 0.1)
    rec(slow, 13, true, 2)
    assert.equal("closed", (slow:state()))
    rec(slow, 1, true, 2)
    assert.equal("open", (slow:state()))
  end)

  it("the comparison is exact for every count up to 200 calls", function()
    local wrong = {}
    for _, pq in ipairs(RATIOS) do
      local p, q = pq[1], pq[2]
      local r = p / q
      for calls = 1, 200 do
        for n = 0, calls do
          if stats.reached(n, calls, r) ~= (q * n >= p * calls) then
            wrong[#wrong + 1] = ("%d/%d: %d of %d"):format(p, q, n, calls)
          end
        end
      end
    end
    assert.same({}, wrong)
  end)

  -- each (ratio, calls) pair, calls <= 100: min_calls = calls, so the
  -- ratio is judged at the last outcome; at the threshold count it
  -- opens, one below it stays closed
  local function walk(kind)
    local wrong = {}
    for _, pq in ipairs(RATIOS) do
      local p, q = pq[1], pq[2]
      for calls = 1, 100 do
        local n = threshold(p, q, calls)
        for _, bad in ipairs { n, n - 1 } do
          if bad >= 0 then
            local w = world()
            local o = { min_calls = calls, window = 3600, buckets = 1,
                        clock = w.clock }
            if kind == "failure" then
              o.failure_ratio = p / q
            else
              o.slow_call_duration, o.slow_call_ratio = 1, p / q
            end
            local br = breaker.new(o)   -- in-process: the quickest
            for _ = 1, calls - bad do br:record(true, nil, 0) end
            for _ = 1, bad do
              if kind == "failure" then br:record(false, nil, 0)
              else br:record(true, nil, 5) end
            end
            local want = bad == n and "open" or "closed"
            if br:state() ~= want then
              wrong[#wrong + 1] = ("%d/%d, %d of %d: %s"):format(p, q, bad,
                calls, br:state())
            end
          end
        end
      end
    end
    return wrong
  end

  it("every (ratio, calls) pair: the failure ratio opens exactly when "
     .. "failures / calls >= ratio", function()
    assert.same({}, walk("failure"))
  end)

  it("every (ratio, calls) pair: the slow-call ratio too", function()
    assert.same({}, walk("slow"))
  end)
end)

describe("a success and the ratios", function()
  it("the success that brings the window to min_calls opens it",
    function()
      local w = world()
      local br = make(w, { failure_ratio = 0.5, min_calls = 4 })
      rec(br, 2, false)
      rec(br, 1, true)
      assert.equal("closed", (br:state()))
      rec(br, 1, true)                   -- 2 of 4
      local s, info = br:state()
      assert.equal("open", s)
      assert.equal(1, info.opening)
    end)

  it("also when the failures are in an earlier bucket", function()
    local w = world()
    local br = make(w, { failure_ratio = 0.5, min_calls = 4 })
    rec(br, 2, false)
    w.t = w.t + 1.5
    rec(br, 1, true)
    assert.equal("closed", (br:state()))
    rec(br, 1, true)
    assert.equal("open", (br:state()))
  end)

  it("and once the window slid past the successes that kept it down",
    function()
      local w = world()
      local br = make(w, { failure_ratio = 0.5, min_calls = 4 })
      rec(br, 4, true)
      w.t = w.t + 5
      rec(br, 3, false)                 -- 3 of 7
      assert.equal("closed", (br:state()))
      w.t = w.t + 5.5                   -- the 4 successes left
      rec(br, 1, true)                  -- 3 of 4
      assert.equal("open", (br:state()))
    end)

  it("a success below the ratio, or with too few calls, does not",
    function()
      local w = world()
      local br = make(w, { failure_ratio = 0.5, min_calls = 10 })
      rec(br, 4, false)
      rec(br, 5, true)                  -- 4 of 9: too few
      assert.equal("closed", (br:state()))
      rec(br, 1, true)                  -- 4 of 10: below
      rec(br, 20, true)
      assert.equal("closed", (br:state()))
    end)
end)

describe("failures in a row and the window", function()
  local function call(br, ok)
    local allowed, ticket = br:allow()
    assert.is_true(allowed)
    br:record(ok, ticket, 0.01)
  end

  it("a success between failures resets the streak, in any bucket",
     function()
    local w = world()
    -- 5 in a row open it; the window (10 buckets of 1 s) never does
    local br = make(w, { failures = 5, failure_ratio = 1,
      min_calls = 1000, window = 10, buckets = 10 })
    for _ = 1, 3 do
      for _ = 1, 4 do call(br, false) end   -- 4 failures in a bucket
      w.t = w.t + 1                         -- the next bucket
      call(br, true)                        -- its first call: a success
      call(br, true)
      for _ = 1, 4 do call(br, false) end   -- 4 more: not 8 in a row
      call(br, true)
      w.t = w.t + 1
    end
    assert.equal("closed", (br:state()))
    for _ = 1, 5 do call(br, false) end
    assert.equal("open", (br:state()))
  end)

  it("reads the streak once per bucket on the happy path", function()
    local w = world()
    local br = make(w, { failures = 5, failure_ratio = 0.5,
      min_calls = 10, window = 10, buckets = 10 })
    call(br, true)
    local d = w.dict.ops
    local gets, incrs = d.get, d.incr
    for _ = 1, 100 do call(br, true) end    -- all in one bucket
    -- allow: the state; record: the bucket's incr, and no streak read
    assert.equal(100, d.get - gets)
    assert.equal(100, d.incr - incrs)
  end)
end)

describe("state()", function()
  it("lists calls, failures and slow of a fresh breaker, as integers",
    function()
      local w = world()
      local br = breaker.recommended { clock = w.clock }
      local s, info = br:state()
      assert.equal("closed", s)
      assert.same({ 0, 0, 0 }, { info.calls, info.failures, info.slow })
      rec(br, 3, true)
      rec(br, 2, false)
      info = select(2, br:state())
      assert.same({ 5, 2, 0 }, { info.calls, info.failures, info.slow })
      if math.type then
        for _, v in ipairs { info.calls, info.failures, info.slow } do
          assert.equal("integer", math.type(v))
        end
      end
    end)
end)

describe("breaker.recommended", function()
  -- the open intervals of a breaker whose probes hang: 5 openings
  local function intervals(o)
    local w = world()
    o.shared, o.key, o.clock = w.dict, "api", w.clock
    local br = breaker.recommended(o)
    while br:state() == "closed" do rec(br, 1, false) end
    local out = {}
    for _ = 1, 5 do
      local _, info = br:state()
      out[#out + 1] = info.interval
      w.t = w.t + info.interval
      local ok, ticket = br:allow()
      assert.is_true(ok)
      br:record(false, ticket, 10)      -- hung
    end
    return out
  end

  it("takes a seed: the same seed, the same open intervals", function()
    local a, b = intervals { seed = 42 }, intervals { seed = 42 }
    assert.same(a, b)
    assert.are_not.same(a, intervals { seed = 43 })
    assert.is_true(a[1] >= 0.8 and a[1] <= 1.2)
    assert.is_true(a[5] >= 12.8 and a[5] <= 19.2)
  end)

  it("takes random and a policy", function()
    local a = intervals { random = function() return 0.5 end }
    assert.same({ 1, 2, 4, 8, 16 }, a)
    local b = intervals { policy = backoff.constant { delay = 0.5 } }
    assert.same({ 0.5, 0.5, 0.5, 0.5, 0.5 }, b)
  end)

  it("names a bad seed, random or mode", function()
    assert.error_matches(function() breaker.recommended { seed = 1.5 } end,
      "backoff.breaker: option 'seed' must be an integer", nil, true)
    assert.error_matches(function() breaker.recommended { random = 1 } end,
      "backoff.breaker: option 'random' must be a function", nil, true)
    assert.error_matches(function() breaker.recommended { mode = "x" } end,
      "backoff.breaker: option 'mode' must be \"enforce\"", nil, true)
    assert.error_matches(function()
      breaker.recommended { failures = 3 }
    end, "unknown option 'failures'", nil, true)
  end)
end)

describe("force", function()
  it("opens by hand for every object of the dict, until force(nil)",
    function()
      local w = world()
      local seen = {}
      local a = make(w, { failures = 3, on_change = function(from, to, i)
        seen[#seen + 1] = from .. ">" .. to .. ":" .. tostring(i.reason)
      end })
      local b = make(w, { failures = 3 })
      a:force("open")
      assert.is_false((b:allow()))
      assert.is_false(b:allows())
      local s, info = b:state()
      assert.equal("open", s)
      assert.equal("open", info.forced)
      w.t = w.t + 3600                  -- no interval ends it
      assert.is_false((b:allow()))
      b:force(nil)
      assert.is_true((a:allow()))
      s, info = a:state()
      assert.equal("closed", s)
      assert.is_nil(info.forced)
      assert.same({ "closed>open:forced" }, seen)
    end)

  it("closes by hand: nothing counted, nothing trips it", function()
    local w = world()
    local a = make(w, { failures = 2 })
    rec(a, 2, false)
    assert.equal("open", (a:state()))
    a:force("closed")
    rec(a, 50, false)
    local s, info = a:state()
    assert.equal("closed", s)
    assert.equal("closed", info.forced)
    a:force(nil)                        -- automatic, counts afresh
    rec(a, 1, false)
    assert.equal("closed", (a:state()))
    rec(a, 1, false)
    assert.equal("open", (a:state()))
  end)

  it("is undone by reset(); a bad argument is named, nothing changed",
    function()
      local w = world()
      local a = make(w, { failures = 2 })
      a:force("open")
      a:reset()
      assert.is_true((a:allow()))
      assert.error_matches(function() a:force("half_open") end,
        "bad argument #1 to 'force' (\"open\", \"closed\" or nil "
        .. "expected, got 'half_open')", nil, true)
      assert.equal("closed", (a:state()))
      a:force(nil)                      -- automatic already: nothing
      assert.equal("closed", (a:state()))
    end)
end)

describe("mode = \"observe\"", function()
  it("records and reports, never refuses", function()
    local w = world()
    local m = metrics.new("api", { shared = false })
    local changes = {}
    local br = make(w, { failures = 2, mode = "observe", metrics = m,
      on_change = function(_, to) changes[#changes + 1] = to end })
    rec(br, 2, false)
    local s, info = br:state()
    assert.equal("open", s)
    assert.equal("observe", info.mode)
    local ok, ticket = br:allow()       -- would be refused
    assert.is_true(ok)
    assert.is_nil(ticket)
    assert.is_true(br:allows())
    br:record(false)                    -- not counted while open
    assert.matches('backoff_breaker_refusals_total{name="api"} 1',
                   metrics.prometheus(), nil, true)
    w.t = w.t + 1
    local ok2, probe = br:allow()
    assert.is_true(ok2)
    assert.equal("table", type(probe))
    assert.is_true((br:allow()))       -- the slot is taken: let through
    br:record(true, probe, 0.1)
    assert.equal("closed", (br:state()))
    assert.same({ "open", "half_open", "closed" }, changes)
  end)
end)

describe("half_open_timeout", function()
  it("reopens a half-open period whose probes said nothing, as hung",
    function()
      local w = world()
      local reasons = {}
      local br = make(w, { failures = 1, probe_timeout = 30,
        half_open_timeout = 5, on_change = function(_, to, info)
          if to == "open" then reasons[#reasons + 1] = info.reason end
        end })
      rec(br, 1, false)
      w.t = w.t + 1
      local ok, lost = br:allow()
      assert.is_true(ok and lost ~= nil)
      w.t = w.t + 4.9
      assert.is_false((br:allow()))
      assert.equal("half_open", (br:state()))
      w.t = w.t + 0.1
      assert.is_false(br:allows())
      assert.is_false((br:allow()))
      local s, info = br:state()
      assert.equal("open", s)
      assert.equal(2, info.opening)
      assert.equal(2, info.interval)   -- hung: the next delay
      assert.same({ "failures", "half_open_timeout" }, reasons)
      br:record(true, lost, 6)         -- too late: ignored
      assert.equal("open", (br:state()))
    end)

  it("ignores a first-probe time from before the period (not its own)",
    function()
      local w = world()
      local br = make(w, { failures = 1, probe_timeout = 30,
                           half_open_timeout = 5 })
      rec(br, 1, false)
      w.t = w.t + 1
      local ok, ticket = br:allow()
      assert.is_true(ok)
      for k in pairs(w.dict.data) do     -- an older writer's value
        if k:match("^api|h") then w.dict.data[k] = 1 end
      end
      assert.is_false((br:allow()))      -- the slot is held
      assert.equal("half_open", (br:state()))
      br:record(true, ticket, 0.1)
      assert.equal("closed", (br:state()))
    end)

  it("defaults to probe_timeout", function()
    local w = world()
    local br = make(w, { failures = 1, probe_timeout = 3 })
    rec(br, 1, false)
    w.t = w.t + 1
    assert.is_true((br:allow()))
    w.t = w.t + 3
    assert.is_false((br:allow()))
    assert.equal(2, select(2, br:state()).opening)
  end)
end)

describe("recovery", function()
  -- probe once the interval has passed; returns the next interval
  local function probe(w, br, ok, seconds)
    w.t = w.t + select(2, br:state()).interval
    local allowed, ticket = br:allow()
    assert.is_true(allowed)
    br:record(ok, ticket, seconds)
    return select(2, br:state()).interval
  end

  it("a probe that fails fast keeps the first interval, however long "
     .. "the outage", function()
    local w = world()
    local br = make(w, { failures = 1 })
    rec(br, 1, false)
    for _ = 1, 50 do assert.equal(1, probe(w, br, false, 0.01)) end
    assert.equal(51, select(2, br:state()).opening)
    assert.is_nil(probe(w, br, true, 0.01))
    assert.equal("closed", (br:state()))
  end)

  it("a hung probe lengthens it; one that fails fast again shortens it",
    function()
      local w = world()
      local br = make(w, { failures = 1, hung_after = 0.5 })
      rec(br, 1, false)
      assert.equal(2, probe(w, br, false, 0.5))
      assert.equal(4, probe(w, br, false, 1))
      assert.equal(8, probe(w, br, false))   -- seconds unknown: hung
      assert.equal(1, probe(w, br, false, 0.2))
      assert.equal(2, probe(w, br, false, 3))
    end)

  it("the recommended breaker is back within 1.2 s of a 300 s outage",
    function()
      local w = world()
      local br = breaker.recommended { shared = w.dict, key = "api",
                                       clock = w.clock, seed = 3 }
      local t_end = w.t + 300
      local back
      while true do                     -- 40 attempts a second
        w.t = w.t + 0.025
        local ok, ticket = br:allow()
        if ok then
          local up = w.t >= t_end
          br:record(up, ticket, 0.01)
          if up and (br:state()) == "closed" then back = w.t break end
        end
      end
      assert.is_true(back - t_end <= 1.2 + 0.05, back - t_end)
    end)
end)

describe("bounds", function()
  it("name a window, probe_timeout, half_open_timeout or hung_after "
     .. "that reads as milliseconds", function()
    for name, bad in pairs { window = { 3601, 10000 },
                             probe_timeout = { 601, 10000 },
                             half_open_timeout = { 601, 10000 },
                             hung_after = { 601, 10000 } } do
      for _, v in ipairs(bad) do
        assert.error_matches(function() breaker.new { [name] = v } end,
          "backoff.breaker: option '" .. name .. "' must be a number of "
          .. "seconds > 0 and <= ", nil, true)
      end
    end
    -- the documented uses stay valid
    breaker.new { window = 3600, buckets = 1, probe_timeout = 600 }
    breaker.new { window = 60, buckets = 60 }
  end)
end)
