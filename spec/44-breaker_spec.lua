-- backoff.breaker on a fake shared dict (spec/breaker_dict.lua) and a
-- fake clock: options, every transition, the rules that trip it, the
-- escalation of the open interval, half-open probes, lost probes,
-- missing / evicted / corrupt keys, hooks and metrics.  The races are
-- in spec/45-breaker_interleave_spec.lua, the doors in
-- spec/46-breaker_doors_spec.lua.
local backoff = require "backoff"
local breaker = require "backoff.breaker"
local metrics = require "backoff.metrics"

local world, make = dofile("spec/breaker_world.lua")

local function fail(br, n, seconds)
  for _ = 1, n or 1 do
    assert.is_true((br:allow()))
    br:record(false, nil, seconds)
  end
end

local function succeed(br, n, seconds)
  for _ = 1, n or 1 do
    assert.is_true((br:allow()))
    br:record(true, nil, seconds)
  end
end

-- the ops made by f on w's dict
local function ops(w, f)
  local before = {}
  for k, v in pairs(w.dict.ops) do before[k] = v end
  f()
  local d = {}
  for k, v in pairs(w.dict.ops) do
    if v ~= before[k] then d[k] = v - before[k] end
  end
  return d
end

describe("backoff.breaker", function()
  it("is on the face, callable, with new and recommended", function()
    assert.equal(breaker, backoff.breaker)
    local w = world()
    local br = breaker { clock = w.clock }
    assert.equal("closed", (br:state()))
    assert.matches("^backoff%.breaker: 'backoff:breaker' %(this process%)$",
                   tostring(br))
    assert.equal("backoff:breaker", br:key())
    assert.equal("api", make(w):key())
  end)

  describe("options", function()
    it("refuses what is not a table, unknown options, bad values",
      function()
        assert.error_matches(function() breaker.new(5) end,
          "backoff.breaker: options must be a table (got number)", nil, true)
        assert.error_matches(function() breaker.new { nope = 1 } end,
          "backoff.breaker: unknown option 'nope'", nil, true)
        local bad = {
          failures = { 0, 1.5, "3", -1, 0 / 0, 2 ^ 32 },
          failure_ratio = { 0, 1.5, 0 / 0, "0.5", -0.1 },
          slow_call_duration = { 0, -1, math.huge, "1" },
          window = { 0, -1, math.huge, 86401 },
          buckets = { 0, 101, 2.5 },
          min_calls = { 0, 1.5 },
          probes = { 0, 101, 1.5 },
          probe_timeout = { 0, -1, math.huge },
          clock = { "x", 1 }, on_change = { 1, "f" },
          metrics = { {}, { run = print } },
          policy = { {}, "exponential", 1 },
          key = { "", 1, true },
          shared = { 1, "dict", {} },
        }
        for name, values in pairs(bad) do
          for _, v in ipairs(values) do
            local ok, err = pcall(breaker.new, { [name] = v })
            assert.is_false(ok, name)
            assert.matches("backoff.breaker: option '" .. name
              .. "' must be ", err, 1, true)
          end
        end
      end)

    it("says where the error is: the caller's line", function()
      local ok, err = pcall(function() breaker.new { probes = 0 } end)
      assert.is_false(ok)
      assert.matches("44%-breaker_spec%.lua:%d+: backoff%.breaker: option "
                     .. "'probes' must be an integer >= 1 and <= 100 "
                     .. "%(got 0%)", err)
    end)

    it("needs slow_call_duration for slow_call_ratio, a key with a dict, "
       .. "and a dict with add, set and delete", function()
      assert.error_matches(function()
        breaker.new { slow_call_ratio = 0.5 }
      end, "option 'slow_call_ratio' needs slow_call_duration", nil, true)
      local w = world()
      assert.error_matches(function() breaker.new { shared = w.dict } end,
        "option 'key' must be a non-empty string (it names this breaker's "
        .. "state in the dict: one key per upstream) (got nil)", nil, true)
      local half = { get = w.dict.get, incr = w.dict.incr }
      assert.error_matches(function()
        breaker.new { shared = half, key = "k" }
      end, "option 'shared' must be an ngx.shared dict", nil, true)
    end)

    it("needs shared inside nginx, unless shared = false", function()
      local saved = rawget(_G, "ngx")
      rawset(_G, "ngx", { get_phase = function() return "init" end,
                          now = function() return 5 end })
      local ok, err = pcall(breaker.new, { key = "k" })
      local ok2, br = pcall(breaker.new, { shared = false })
      local ok3, err3 = pcall(breaker.recommended, { key = "k" })
      rawset(_G, "ngx", saved)
      assert.is_false(ok)
      assert.matches("backoff.breaker: option 'shared' must be an "
                     .. "ngx.shared dict inside nginx", err, 1, true)
      assert.is_true(ok2)
      assert.equal("closed", (br:state()))
      assert.is_false(ok3)
      assert.matches("option 'shared' must be", err3, 1, true)
    end)

    it("recommended takes shared, key, clock, on_change, metrics, mode, "
       .. "policy, seed and random only",
      function()
        assert.error_matches(function()
          breaker.recommended { failures = 3 }
        end, "backoff.breaker.recommended: unknown option 'failures'", nil,
          true)
        assert.error_matches(function() breaker.recommended(1) end,
          "backoff.breaker.recommended: options must be a table (got "
          .. "number)", nil, true)
        local w = world()
        local br = breaker.recommended { shared = w.dict, key = "r",
                                         clock = w.clock }
        -- 50 failures in a row open it (fewer than min_calls in the
        -- window would not, spread over time)
        for _ = 1, 49 do
          br:record(false)
          w.t = w.t + 2
        end
        assert.equal("closed", (br:state()))
        br:record(false)
        local s, info = br:state()
        assert.equal("open", s)
        assert.is_true(info.interval >= 0.8 and info.interval <= 1.2)
      end)

    it("builds nothing and writes nothing", function()
      local w = world()
      make(w)
      breaker.recommended { shared = w.dict, key = "z" }
      assert.equal(0, w.dict:total())
    end)
  end)

  describe("closed", function()
    it("allows with one dict get, writing nothing; the ticket is the "
       .. "closed epoch, so that record reads no state", function()
      local w = world()
      local br = make(w)
      succeed(br)                         -- the state key exists
      assert.same({ get = 1 }, ops(w, function()
        assert.is_true(br:allows())
      end))
      local a, b
      assert.same({ get = 1 }, ops(w, function() a, b = br:allow() end))
      assert.is_true(a)
      assert.equal("number", type(b))
      -- record with it: the counts only (no read of the state)
      local before = w.dict.ops.get
      br:record(true, b, 0.001)
      local reads = w.dict.ops.get - before
      local other = make(w)
      before = w.dict.ops.get
      other:record(true, nil, 0.001)      -- without: the state read too
      assert.equal(reads + 1, w.dict.ops.get - before)
      br:release(b)                       -- nothing to give back
    end)

    it("allows a missing state (closed) without writing it", function()
      local w = world()
      local br = make(w)
      assert.same({ get = 1 }, ops(w, function()
        assert.is_true(br:allows())
        end))
      assert.same({ get = 1 }, ops(w, function()
        assert.is_true((br:allow()))
      end))
      assert.equal(0, w.dict.ops.set + w.dict.ops.add)
    end)
  end)

  describe("consecutive failures", function()
    it("trip on the N-th in a row; a success starts the count again",
      function()
        local w = world()
        local br = make(w, { failures = 3 })
        fail(br, 2)
        succeed(br)
        fail(br, 2)
        assert.equal("closed", (br:state()))
        fail(br)
        local s, info = br:state()
        assert.equal("open", s)
        assert.equal(1, info.opening)
        assert.equal(1, info.interval)
        assert.equal(1, info.left)
      end)
  end)

  describe("a streak", function()
    it("is forgotten an hour after its first failure", function()
      local w = world()
      local br = make(w, { failures = 3 })
      fail(br, 2)
      w.t = w.t + 3599
      assert.equal("closed", (br:state()))
      w.t = w.t + 1
      fail(br, 2)                         -- a new streak: 2
      assert.equal("closed", (br:state()))
      fail(br)
      assert.equal("open", (br:state()))
      -- the trip deleted its period's streak
      local n = 0
      for k in pairs(w.dict.data) do
        if k:match("^api|f") then n = n + 1 end
      end
      assert.equal(0, n)
    end)
  end)

  describe("the failure ratio", function()
    it("trips at the ratio once min_calls calls are in the window",
      function()
        local w = world()
        local br = make(w, { failure_ratio = 0.5, min_calls = 10 })
        succeed(br, 9)
        fail(br, 1)                       -- 10 calls, 1 failure
        assert.equal("closed", (br:state()))
        local _, info = br:state()
        assert.same({ 10, 1, 0 }, { info.calls, info.failures, info.slow })
        w.t = w.t + 0.5
        fail(br, 7)                       -- 8 of 17 fail
        assert.equal("closed", (br:state()))
        fail(br)                          -- 9 of 18: the ratio
        assert.equal("open", (br:state()))
      end)

    it("slides: a bucket counts until it leaves the window, never reset "
       .. "at once", function()
        local w = world()
        w.t = 1000.2                      -- buckets of 1 s: 1000, 1001, ...
        local br = make(w, { failure_ratio = 0.5, min_calls = 10 })
        succeed(br, 20)                   -- bucket 1000
        w.t = 1009.9                      -- the window: buckets 1000..1009
        fail(br, 15)                      -- 15 of 35
        assert.equal("closed", (br:state()))
        local _, info = br:state()
        assert.equal(35, info.calls)
        w.t = 1010.1                      -- bucket 1000 has left
        _, info = br:state()
        assert.same({ 15, 15 }, { info.calls, info.failures })
        fail(br)
        assert.equal("open", (br:state()))
      end)

    it("starts each closed period with an empty window", function()
      local w = world()
      local br = make(w, { failure_ratio = 0.5, min_calls = 4 })
      fail(br, 4)
      assert.equal("open", (br:state()))
      w.t = w.t + 1
      local ok, ticket = br:allow()
      assert.is_true(ok)
      br:record(true, ticket)
      local s, info = br:state()
      assert.equal("closed", s)
      assert.same({ 0, 0 }, { info.calls, info.failures })
      fail(br, 3)                         -- the 4 old failures are gone
      assert.equal("closed", (br:state()))
    end)
  end)

  describe("slow calls", function()
    it("trip on the slow ratio; a call at or above the duration is slow",
      function()
        local w = world()
        local br = make(w, { slow_call_duration = 1, slow_call_ratio = 0.5,
                             min_calls = 4 })
        succeed(br, 2, 0.99)
        succeed(br, 1)                    -- seconds unknown: not slow
        succeed(br, 1, 1)
        local _, info = br:state()
        assert.same({ 4, 0, 1 }, { info.calls, info.failures, info.slow })
        local seen
        br.on_change = function(_, _, i) seen = i.reason end
        succeed(br, 1, 5)                 -- 2 of 5 slow
        assert.equal("closed", (br:state()))
        succeed(br, 1, 5)                 -- 3 of 6
        assert.equal("open", (br:state()))
        assert.equal("slow_call_ratio", seen)
      end)

    it("count a slow probe as a failed one", function()
      local w = world()
      local br = make(w, { failures = 1, slow_call_duration = 1 })
      fail(br)
      w.t = w.t + 1
      local ok, ticket = br:allow()
      assert.is_true(ok)
      br:record(true, ticket, 2)
      local s, info = br:state()
      assert.equal("open", s)
      assert.equal(2, info.opening)
    end)
  end)

  describe("open and half-open", function()
    it("refuses while open, then admits exactly `probes` probes across "
       .. "objects", function()
      local w = world()
      local br = make(w, { failures = 1, probes = 2 })
      local other = make(w, { failures = 1, probes = 2 })
      fail(br)
      assert.is_false(br:allows())
      assert.is_false((br:allow()))
      assert.is_false((other:allow()))
      w.t = w.t + 0.999
      assert.is_false((other:allow()))
      w.t = w.t + 0.001
      assert.equal("half_open", (br:state()))
      assert.is_true(br:allows())
      local a, ta = br:allow()
      assert.is_true(br:allows())
      local b, tb = other:allow()
      assert.is_true(a and b)
      assert.is_not_nil(ta)
      assert.is_not_nil(tb)
      assert.is_false(br:allows())
      assert.is_false((br:allow()))
      assert.is_false((other:allow()))
      -- one success: still half-open; the second closes
      br:record(true, ta)
      assert.equal("half_open", (br:state()))
      assert.is_false((br:allow()))
      other:record(true, tb)
      local s, info = br:state()
      assert.equal("closed", s)
      assert.equal(0, info.opening)
    end)

    it("reopens at once on a probe's failure, with the next interval; a "
       .. "late success of its epoch changes nothing", function()
      local w = world()
      local br = make(w, { failures = 1, probes = 2 })
      fail(br)
      w.t = w.t + 1
      local _, t1 = br:allow()
      local _, t2 = br:allow()
      br:record(false, t2)
      local s, info = br:state()
      assert.equal("open", s)
      assert.same({ 2, 2, 2 }, { info.opening, info.interval, info.left })
      br:record(true, t1)                 -- stale: ignored while open
      assert.equal("open", (br:state()))
      w.t = w.t + 2
      local _, t3 = br:allow()
      br:record(false, t3)
      _, info = br:state()
      assert.same({ 3, 4 }, { info.opening, info.interval })
    end)

    it("follows the policy: the k-th opening waits its k-th failure delay, "
       .. "with its jitter", function()
      local w = world()
      local policy = backoff.exponential { initial_delay = 1, max_delay = 60,
        jitter = "proportional", jitter_factor = 0.2, seed = 7 }
      local br = make(w, { failures = 1, policy = policy })
      local expected = policy:clone(0)
      fail(br)
      for k = 1, 9 do
        local s, info = br:state()
        assert.equal("open", s)
        assert.equal(k, info.opening)
        local want = expected:failure(0)
        assert.equal(want, info.interval)
        local nominal = math.min(2 ^ (k - 1), 60)
        assert.is_true(info.interval >= 0.8 * nominal - 1e-9
          and info.interval <= math.min(1.2 * nominal, 60) + 1e-9)
        w.t = w.t + info.interval
        local ok, ticket = br:allow()
        assert.is_true(ok)
        br:record(false, ticket)
      end
      assert.equal(0, policy:attempts())  -- the caller's, never touched
    end)

    it("keeps the last delay of a policy that gives up", function()
      local w = world()
      local br = make(w, { failures = 1, policy =
        backoff.exponential { initial_delay = 1, max_attempts = 3 } })
      fail(br)
      local seen = {}
      for _ = 1, 5 do
        local _, info = br:state()
        seen[#seen + 1] = info.interval
        w.t = w.t + info.interval
        local _, ticket = br:allow()
        br:record(false, ticket)
      end
      assert.same({ 1, 2, 2, 2, 2 }, seen)
    end)

    it("resets the escalation when it closes", function()
      local w = world()
      local br = make(w, { failures = 1 })
      fail(br)
      w.t = w.t + 1
      local _, t = br:allow()
      br:record(false, t)                 -- opening 2, 2 s
      w.t = w.t + 2
      _, t = br:allow()
      br:record(true, t)
      assert.equal("closed", (br:state()))
      fail(br)
      local _, info = br:state()
      assert.same({ 1, 1 }, { info.opening, info.interval })
    end)

    it("ignores outcomes without a ticket while open or half-open",
      function()
        local w = world()
        local br = make(w, { failures = 1 })
        fail(br)
        br:record(true)                   -- an attempt allowed before
        br:record(false)
        local _, info = br:state()
        assert.equal(1, info.opening)
        w.t = w.t + 1
        br:record(true)
        assert.equal("half_open", (br:state()))
      end)
  end)

  describe("lost probes", function()
    it("free their slot after probe_timeout", function()
      local w = world()
      local br = make(w, { failures = 2, probe_timeout = 5,
                           half_open_timeout = 60 })
      fail(br, 2)
      w.t = w.t + 1
      local ok, lost = br:allow()          -- never reports
      assert.is_true(ok)
      assert.is_not_nil(lost)
      w.t = w.t + 4.9
      assert.is_false((br:allow()))
      assert.equal("half_open", (br:state()))
      w.t = w.t + 0.1
      local ok2, ticket = br:allow()
      assert.is_true(ok2)
      br:record(true, ticket)
      assert.equal("closed", (br:state()))
      br:record(false, lost)               -- too late: counted as closed
      assert.equal("closed", (br:state()))
      fail(br)                             -- the second in a row
      assert.equal("open", (br:state()))
    end)

    it("are given back by release; a stale release frees nobody else's",
      function()
        local w = world()
        local br = make(w, { failures = 1, probe_timeout = 5,
                             half_open_timeout = 60 })
        fail(br)
        w.t = w.t + 1
        local _, t1 = br:allow()
        assert.is_false((br:allow()))
        br:release(t1)
        local ok, t2 = br:allow()
        assert.is_true(ok)
        w.t = w.t + 5                      -- t2 lost; t3 takes the slot
        local _, t3 = br:allow()
        assert.is_not_nil(t3)
        br:release(t2)                     -- t2's slot is t3's now
        assert.is_false((br:allow()))
        br:release(nil)                    -- nothing
        br:record(true, t3)
        assert.equal("closed", (br:state()))
      end)
  end)

  describe("missing, evicted and corrupt keys", function()
    it("a missing state is closed; the next outcome writes a fresh epoch",
      function()
        local w = world()
        local br = make(w, { failures = 2 })
        fail(br, 2)
        assert.equal("open", (br:state()))
        w.dict.data["api|s"] = nil         -- evicted
        assert.equal("closed", (br:state()))
        assert.is_true((br:allow()))
        fail(br)
        assert.equal("number", type(w.dict.data["api|s"]))
        fail(br)
        assert.equal("open", (br:state()))
      end)

    it("a corrupt state is logged, deleted and closed", function()
      local saved = rawget(_G, "ngx")
      local logged = {}
      rawset(_G, "ngx", { WARN = 5, NOTICE = 6, ERR = 4,
        log = function(_, ...) logged[#logged + 1] = table.concat { ... } end })
      local w = world()
      local br = make(w, { failures = 2 })
      local seen = {}
      -- the last two are well formed but implausible: opened in the
      -- future, or for longer than the policy can draw (they would
      -- refuse for ever)
      local bad = { "garbage", "o1:1:x:1", 1.5, 0 / 0, true, "o1:0:5:1",
                    "o1:1:5:-1", "o1:1:99999999999:1", "o1:1:0:1e308" }
      for _, v in ipairs(bad) do
        w.dict.data["api|s"] = v
        seen[#seen + 1] = br:allow() and br:allows()
                          and w.dict.data["api|s"] == nil
      end
      rawset(_G, "ngx", saved)
      for i = 1, #bad do assert.is_true(seen[i], tostring(bad[i])) end
      assert.equal(#bad, #logged)
      assert.matches("backoff.breaker 'api': corrupt value under key "
                     .. "'api|s' ('garbage'; not one it writes", logged[1],
                     1, true)
      assert.matches("deleted, read as missing", logged[1], 1, true)
    end)

    it("corrupt or evicted counters count nothing and raise nothing",
      function()
        local w = world()
        local br = make(w, { failures = 3, failure_ratio = 0.5,
                             min_calls = 3 })
        succeed(br)
        local e = w.dict.data["api|s"]
        w.dict.data["api|f" .. e] = "x"
        w.dict.data["api|w" .. e .. ".1000"] = "y"
        fail(br)                          -- both counters found corrupt
        assert.is_nil(w.dict.data["api|f" .. e])
        assert.is_nil(w.dict.data["api|w" .. e .. ".1000"])
        assert.equal("closed", (br:state()))
        fail(br, 2)
        assert.equal("closed", (br:state()))
        fail(br)
        assert.equal("open", (br:state()))
      end)

    it("a full dict loses counts, never raises", function()
      local w = world()
      local br = make(w, { failures = 2, failure_ratio = 0.5 })
      succeed(br)
      w.dict.fail = "no memory"
      fail(br, 5)
      assert.equal("closed", (br:state()))
      w.dict.fail = nil
      fail(br, 2)
      assert.equal("open", (br:state()))
    end)
  end)

  describe("its state", function()
    it("survives new objects: nothing is reset by building one", function()
      local w = world()
      fail(make(w, { failures = 1 }))
      local again = make(w, { failures = 1 })
      assert.equal("open", (again:state()))
      assert.is_false((again:allow()))
      -- another key is another breaker
      assert.is_true((make(w, { key = "other" }):allow()))
    end)

    it("is reset by reset(), which tells the hook", function()
      local w = world()
      local calls = {}
      local br = make(w, { failures = 1, on_change = function(f, t)
        calls[#calls + 1] = f .. ">" .. t end })
      fail(br)
      br:reset()
      assert.equal("closed", (br:state()))
      br:reset()                          -- closed already: no change
      fail(br)
      local _, info = br:state()
      assert.equal(1, info.opening)
      assert.same({ "closed>open", "open>closed", "closed>open" }, calls)
    end)

    it("does not pile keys up in the dict when it flaps", function()
      local w = world()
      local br = make(w, { failures = 1, failure_ratio = 0.5, min_calls = 1,
                           policy = backoff.constant { delay = 1 } })
      local function live()
        local n = 0
        for k in pairs(w.dict.data) do
          if w.dict:get(k) ~= nil then n = n + 1 end
        end
        return n
      end
      for _ = 1, 100 do                   -- 100 openings, over 5 minutes
        succeed(br, 3)
        fail(br)
        w.t = w.t + 1
        local _, t = br:allow()
        br:record(true, t)
        w.t = w.t + 2
      end
      assert.equal("closed", (br:state()))
      -- the half-open announcements of the last hour (100), and those
      -- of the last seconds: elections (5 s), probe slots (10 s), probe
      -- outcomes (20 s), window buckets (11 s)
      assert.is_true(live() <= 100 + 20, live())
      w.t = w.t + 3600
      assert.is_true(live() <= 4, live())  -- the state, the epoch counter
    end)

    it("keeps one per process without a dict", function()
      local w = world()
      local a = breaker.new { failures = 1, clock = w.clock,
                              half_open_timeout = 60 }
      local b = breaker.new { failures = 1, clock = w.clock }
      fail(a)
      assert.equal("open", (a:state()))
      assert.equal("closed", (b:state()))
      w.t = w.t + 1.2                     -- the default policy: 1 s +-20%
      local ok, t = a:allow()
      assert.is_true(ok)
      assert.is_false((a:allow()))
      w.t = w.t + 10                      -- probe_timeout: 10 s
      assert.is_true((a:allow()))
      a:record(true, t)
    end)

    it("refuses a clock that returns no finite number, at the caller",
      function()
        local w = world()
        local br = make(w, { failures = 1 })
        fail(br)
        w.t = 0 / 0
        assert.error_matches(function() br:allow() end,
          "backoff.breaker: option 'clock' must return a finite number "
          .. "(got nan)", nil, true)
      end)
  end)

  describe("methods", function()
    it("check self and their arguments", function()
      local w = world()
      local br = make(w)
      for _, m in ipairs { "allow", "allows", "record", "release", "state",
                           "reset", "key" } do
        assert.error_matches(function() br[m]({}) end, "calling '" .. m
          .. "' on bad self (backoff.breaker expected, got table)", nil,
          true)
      end
      assert.error_matches(function() br:record(1) end,
        "bad argument #1 to 'record' (boolean expected for 'ok', got 1)",
        nil, true)
      assert.error_matches(function() br:record(true, {}) end,
        "bad argument #2 to 'record' (a ticket from allow() or nil", nil,
        true)
      assert.error_matches(function() br:record(true, nil, -1) end,
        "bad argument #3 to 'record' (a finite number >= 0 or nil expected "
        .. "for 'seconds', got -1)", nil, true)
      assert.error_matches(function() br:release("t") end,
        "bad argument #1 to 'release' (a ticket from allow() or nil", nil,
        true)
      assert.equal(0, w.dict.ops.set + w.dict.ops.incr + w.dict.ops.add)
    end)
  end)

  describe("hooks", function()
    it("tell each change once, in the object that made it", function()
      local w = world()
      local seen = {}
      local function hook(name)
        return function(from, to, info)
          seen[#seen + 1] = { name, from, to, info.opening, info.reason,
                              info.key }
        end
      end
      local a = make(w, { failures = 2, on_change = hook("a") })
      local b = make(w, { failures = 2, on_change = hook("b") })
      fail(a)
      fail(b)                             -- b trips it
      w.t = w.t + 1
      local _, ta = a:allow()             -- a announces half-open
      a:record(false, ta)                 -- and reopens
      w.t = w.t + 2
      local _, tb = b:allow()
      b:record(true, tb)                  -- b closes
      assert.same({
        { "b", "closed", "open", 1, "failures", "api" },
        { "a", "open", "half_open", 1, nil, "api" },
        { "a", "half_open", "open", 2, "probe", "api" },
        { "b", "open", "half_open", 2, nil, "api" },
        { "b", "half_open", "closed", 2, nil, "api" },
      }, seen)
    end)

    it("a hook that raises: the change is made; a probe it stopped is "
       .. "given back", function()
      local w = world()
      local boom = false
      local br = make(w, { failures = 1, on_change = function()
        if boom then error("hook failed", 0) end end })
      boom = true
      assert.error_matches(function() br:record(false) end, "hook failed",
                           nil, true)
      assert.equal("open", (br:state()))
      w.t = w.t + 1
      assert.error_matches(function() br:allow() end, "hook failed", nil,
                           true)
      boom = false
      local ok, t = br:allow()            -- the slot is free again
      assert.is_true(ok)
      br:record(true, t)
      assert.equal("closed", (br:state()))
    end)
  end)

  describe("metrics", function()
    -- the exposition, read back: family -> { labels text -> value }
    local function parse(text)
      local t, types = {}, {}
      for line in text:gmatch("[^\n]+") do
        local fam, kind = line:match("^# TYPE (%S+) (%S+)$")
        if fam then
          types[fam] = kind
        elseif not line:match("^# HELP ") then
          local name, labels, v = line:match("^([%w_]+){(.-)} (%S+)$")
          assert(name, "not a sample: " .. line)
          t[name] = t[name] or {}
          t[name][labels] = tonumber(v)
        end
      end
      return t, types
    end

    it("count transitions and refusals, and show the state", function()
      metrics.reset()
      local w = world()
      local m = metrics.new("pay", { shared = false })
      local br = make(w, { failures = 1, metrics = m })
      local text = metrics.prometheus()
      local t, types = parse(text)
      assert.same({ ['name="pay"'] = 0 }, t.backoff_breaker_state)
      assert.equal("gauge", types.backoff_breaker_state)
      assert.is_nil(t.backoff_breaker_transitions_total)
      fail(br)
      assert.is_false((br:allow()))
      assert.is_false((br:allow()))
      t = parse(metrics.prometheus())
      assert.same({ ['name="pay"'] = 1 }, t.backoff_breaker_state)
      assert.same({ ['name="pay"'] = 2 }, t.backoff_breaker_refusals_total)
      w.t = w.t + 1
      t = parse(metrics.prometheus())
      assert.same({ ['name="pay"'] = 2 }, t.backoff_breaker_state)
      local _, ticket = br:allow()
      assert.is_false((br:allow()))
      br:record(true, ticket)
      t, types = parse(metrics.prometheus())
      assert.same({ ['name="pay",to="open"'] = 1,
                    ['name="pay",to="half_open"'] = 1,
                    ['name="pay",to="closed"'] = 1 },
                  t.backoff_breaker_transitions_total)
      assert.same({ ['name="pay"'] = 3 }, t.backoff_breaker_refusals_total)
      assert.same({ ['name="pay"'] = 0 }, t.backoff_breaker_state)
      assert.equal("counter", types.backoff_breaker_transitions_total)
      assert.equal("counter", types.backoff_breaker_refusals_total)
      -- the retry counters are as they were: nothing counted there
      assert.equal(0, m:counts().attempts)
      metrics.reset()
      t = parse(metrics.prometheus())
      assert.is_nil(t.backoff_breaker_refusals_total)
    end)
  end)

  describe("by hand", function()
    it("runs the loop of doc/breaker.md", function()
      local w = world()
      local br = make(w, { failures = 2 })
      local up = true
      local made, refused = 0, 0
      for _ = 1, 20 do
        local ok, ticket = br:allow()
        if ok then
          made = made + 1
          local t0 = w.clock()
          w.t = w.t + 0.25
          br:record(up, ticket, w.clock() - t0)
        else
          refused = refused + 1
          w.t = w.t + 0.25
        end
        if made == 3 then up = false end
        if refused == 6 then up = true end
      end
      assert.equal("closed", (br:state()))
      assert.is_true(refused >= 6)
      assert.equal(20, made + refused)
    end)
  end)
end)
