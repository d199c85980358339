-- backoff.hedge: hedging that never makes things worse (issue 32): a
-- copy to another peer, gRFC A6's cap on copies, the server's pushback,
-- and hedge.pace (hedges paced per second, stopped when they stop
-- winning).  Against the fake ngx of spec/fake_ngx_threads.lua, in
-- virtual time.
local backoff = require "backoff"
local hedge = require "backoff.hedge"

local root = (debug.getinfo(1, "S").source:match("^@(.-)[^/]*$") or "./")
local new_fake = dofile(root .. "fake_ngx_threads.lua")
local new_dict = dofile(root .. "budget_dict.lua")

local unpack = table.unpack or unpack  -- luacheck: ignore 143

-- an upstream: script[attempt] = { latency, results } (the last
-- repeats); logs each copy's attempt, peer and token
local function upstream(fake, script)
  local u = { peers = {}, tokens = {}, calls = 0 }
  u.fn = function(attempt, _, cancel, peer)
    u.calls = u.calls + 1
    u.peers[attempt], u.tokens[attempt] = peer, cancel
    local s = script[attempt] or script[#script]
    fake.sleep(s[1])
    return unpack(s[2], 1, s[2].n or #s[2])
  end
  return u
end

local function res(status, headers)
  return { status = status, headers = headers or {} }
end

describe("hedging that never makes things worse", function()
  local saved, fake, p
  before_each(function()
    saved = rawget(_G, "ngx")
    fake = new_fake()
    rawset(_G, "ngx", fake)
    p = backoff.constant { delay = 0, max_attempts = 3, clock = fake.clock }
  end)
  after_each(function() rawset(_G, "ngx", saved) end)

  local function opts(t)
    local o = { method = "GET", delay = 0.05, budget = false }
    for k, v in pairs(t or {}) do o[k] = v end
    return o
  end

  describe("a copy to another peer", function()
    it("sends each copy of a request to another peer; the next request "
       .. "to the cheaper of the next two, which answered", function()
      local list = { "a", "b", "c", "d" }
      local u = upstream(fake, { { 1, { 200 } }, { 1, { 200 } },
                                 { 0.01, { 203 } } })
      assert.equal(203, hedge.request(p, u.fn, opts { peers = list,
                                                      pace = false }))
      local first = u.peers[1]
      local i
      for k, v in ipairs(list) do if v == first then i = k end end
      assert.same({ list[i], list[i % 4 + 1], list[(i + 1) % 4 + 1] },
                  u.peers)
      -- the token says it too
      assert.equal(u.peers[2], u.tokens[2].peer)
      assert.equal(2, u.tokens[2].attempt)
      -- the next pair in turn is (copy 2's peer, copy 3's): copy 2 was
      -- cancelled after 0.05 s, copy 3 answered in 0.01 s
      u = upstream(fake, { { 0, { 200 } } })
      hedge.request(p, u.fn, opts { peers = list })
      assert.equal(list[(i + 1) % 4 + 1], u.peers[1])
    end)

    it("sends a first copy to the less busy of the next two peers",
      function()
        local peers = require "backoff.hedge.peers"
        local list = { "a", "b", "c", "d" }
        -- three requests whose copies are still in flight: a, b, c
        local held = {}
        for k = 1, 3 do
          local ch = peers.chooser(list)
          local peer, i = ch:choose(1)
          held[k] = { ch, i }
          assert.equal(list[k], peer)
        end
        -- a's copy ended; b, c still busy: the next pair is (d, a)
        held[1][1]:done(held[1][2])
        assert.equal("d", (peers.chooser(list):choose(1)))
        -- pair (a, b): a is free, b busy
        assert.equal("a", (peers.chooser(list):choose(1)))
        -- (b, c) both busy with one each, and d with one, a with one:
        -- a tie takes the first
        assert.equal("b", (peers.chooser(list):choose(1)))
        -- a hedge goes to the least busy untried peer
        local xyz = { "x", "y", "z" }
        local ch = peers.chooser(xyz)
        assert.equal("x", (ch:choose(1)))
        local other = peers.chooser(xyz)
        other:choose(1)                        -- y busy
        assert.equal("z", (ch:choose(2)))
        assert.equal("y", (ch:choose(3)))
        assert.equal("z", (ch:choose(4)))     -- all tried: the next
      end)

    it("avoids a slow peer for a while; a cancelled copy counts as ended",
      function()
        local list = { "a", "b" }
        local u = upstream(fake, { { 1, { 200 } }, { 0.01, { 201 } } })
        assert.equal(201, hedge.request(p, u.fn, opts { peers = list }))
        -- a's copy lost (cancelled after 0.05 s): b is the cheaper
        local seen = {}
        for _ = 1, 4 do
          u = upstream(fake, { { 0, { 200 } } })
          hedge.request(p, u.fn, opts { peers = list })
          seen[u.peers[1]] = (seen[u.peers[1]] or 0) + 1
        end
        assert.same({ b = 4 }, seen)
        -- a minute later the latencies have faded, and no copy is in
        -- flight (a leaked count would keep a avoided): in turn again
        fake.sleep(60)
        seen = {}
        for _ = 1, 4 do
          u = upstream(fake, { { 0, { 200 } } })
          hedge.request(p, u.fn, opts { peers = list })
          seen[u.peers[1]] = (seen[u.peers[1]] or 0) + 1
        end
        assert.same({ a = 2, b = 2 }, seen)
      end)

    it("asks a function, which sees the peers already tried", function()
      local seen = {}
      local function pick(attempt, tried)
        seen[attempt] = table.concat(tried, ",")
        return "p" .. attempt
      end
      local u = upstream(fake, { { 1, { 200 } }, { 0.01, { 201 } } })
      assert.equal(201, hedge.request(p, u.fn, opts { peers = pick }))
      assert.same({ "p1", "p2" }, u.peers)
      assert.same({ "", "p1" }, seen)
    end)

    it("sends an unhedged request's retry to another peer too", function()
      local u = upstream(fake, { { 0, { nil, "connection refused",
                                        "connect" } }, { 0, { 200 } } })
      assert.equal(200, hedge.request(p, u.fn, opts { method = "POST",
        peers = { "x", "y" } }))
      assert.are_not.equal(u.peers[1], u.peers[2])
    end)

    it("passes no peer without the option", function()
      local u = upstream(fake, { { 1, { 200 } }, { 0.01, { 201 } } })
      hedge.request(p, u.fn, opts())
      assert.is_nil(u.peers[2])
      assert.is_nil(u.tokens[2].peer)
    end)
  end)

  describe("gRFC A6's cap", function()
    it("refuses a policy of more than 5 copies, naming max_attempts",
      function()
        local u = upstream(fake, { { 0, { 200 } } })
        local ok, err = pcall(hedge.request, backoff.constant { delay = 0,
          max_attempts = 6 }, u.fn, opts())
        assert.is_false(ok)
        assert.matches("backoff.hedge.request: the policy's max_attempts "
          .. "must be <= 5 for hedging (got 6)", err, 1, true)
        assert.equal(0, u.calls)
        assert.equal(200, hedge.request(backoff.constant { delay = 0,
          max_attempts = 5 }, u.fn, opts()))
      end)
  end)

  describe("the options", function()
    it("refuses bad peers, pace and pushback, naming them", function()
      local e = "backoff.hedge.request: option '"
      local u = upstream(fake, { { 0, { 200 } } })
      for _, c in ipairs {
        { { peers = {} }, e .. "peers' must be a non-empty list" },
        { { peers = { a = 1 } }, e .. "peers'" },
        { { peers = { 1, 2, x = 3 } }, e .. "peers'" },
        { { peers = "a" }, e .. "peers'" },
        { { pace = {} }, e .. "pace' must be a hedge.pace object" },
        { { pace = true }, e .. "pace'" },
        { { pushback = "a b" }, e .. "pushback' must be a header name" },
        { { pushback = 5 }, e .. "pushback'" },
        { { pushback = true }, e .. "pushback'" },
      } do
        local ok, err = pcall(hedge.request, p, u.fn, opts(c[1]))
        assert.is_false(ok)
        assert.matches(c[2], err, 1, true)
      end
      assert.equal(0, u.calls)
    end)
  end)

  describe("the server's pushback", function()
    it("stops the request's hedges and the upstream's for its "
       .. "milliseconds", function()
      local pace = hedge.pace { clock = fake.clock, shared = false }
      -- copy 1 fails at once, with a pushback of 500 ms: its replacement
      -- starts (a retry), no hedge does
      local u = upstream(fake, {
        { 0, { res(503, { ["hedge-pushback-ms"] = "500" }) } },
        { 0.01, { 200 } } })
      assert.equal(200, hedge.request(p, u.fn, opts { pace = pace }))
      assert.equal(2, u.calls)
      assert.equal(false, (pace:allow()))
      -- the next request within the pause: one copy
      u = upstream(fake, { { 0.3, { 200 } }, { 0.01, { 201 } } })
      assert.equal(200, hedge.request(p, u.fn, opts { pace = pace }))
      assert.equal(1, u.calls)
      -- after it: hedged again
      fake.sleep(0.5)
      u = upstream(fake, { { 0.3, { 200 } }, { 0.01, { 201 } } })
      assert.equal(201, hedge.request(p, u.fn, opts { pace = pace }))
    end)

    it("is read on an answer too; a value that is no count stops only "
       .. "the request's hedges; pushback = false reads none", function()
      local pace = hedge.pace { clock = fake.clock, shared = false }
      local u = upstream(fake, {
        { 0, { res(200, { ["Hedge-Pushback-Ms"] = "1000" }) } } })
      hedge.request(p, u.fn, opts { pace = pace })
      assert.same({ false, "pushback" }, { pace:allow() })
      fake.sleep(1)
      assert.is_true(pace:allow())
      u = upstream(fake, { { 0, { res(503, { ["hedge-pushback-ms"] =
        "-1" }) } }, { 0.1, { 200 } } })
      hedge.request(p, u.fn, opts { pace = pace, delay = 0.05 })
      assert.equal(2, u.calls)             -- the retry, and no hedge
      assert.is_true(pace:allow())
      u = upstream(fake, { { 0, { res(200, { ["hedge-pushback-ms"] =
        "1000" }) } } })
      hedge.request(p, u.fn, opts { pace = pace, pushback = false })
      assert.is_true(pace:allow())
      u = upstream(fake, { { 0, { res(200, { ["x-stop"] = "1000" }) } } })
      hedge.request(p, u.fn, opts { pace = pace, pushback = "X-Stop" })
      assert.equal(false, (pace:allow()))
    end)
  end)

  describe("hedge.pace", function()
    local clock, now
    before_each(function()
      now = 100
      clock = function() return now end
    end)

    it("allows burst hedges with no history: a run's first hedges",
      function()
        local pc = hedge.pace { clock = clock, shared = false }
        assert.is_true(pc:allow())
        pc:hedged()
        assert.is_true(pc:allow())
        pc:hedged()
        assert.same({ false, "paced" }, { pc:allow() })
      end)

    it("paces hedges to percent of the last second's requests", function()
      local pc = hedge.pace { clock = clock, shared = false, percent = 10 }
      local granted = 0
      for i = 1, 1000 do             -- 1000 requests over 10 s, all slow
        now = 100 + i / 100
        pc:request()
        if pc:allow() then pc:hedged() granted = granted + 1 end
        -- no second holds more than its share (+ the burst at the start)
      end
      assert.is_true(granted >= 95 and granted <= 102, granted)
      -- a spike of requests hedging at once in one second: 10%
      now, granted = 200.5, 0
      for _ = 1, 100 do pc:request() end
      for _ = 1, 100 do
        if pc:allow() then pc:hedged() granted = granted + 1 end
      end
      assert.equal(10, granted)
    end)

    it("stops hedging (but for probes) when hedges stop winning; "
       .. "hedges that win keep it", function()
      local pc = hedge.pace { clock = clock, shared = false }
      for _ = 1, 9 do pc:outcome(1, false) end
      assert.same({ 0.1, false }, { pc:share() })     -- too few to judge
      pc:outcome(1, false)
      assert.same({ 0.1 * 0.1, true }, { pc:share() })
      -- no burst while losing: 1% of 100 requests in the second
      for _ = 1, 100 do pc:request() end
      assert.is_true(pc:allow())
      pc:hedged()
      assert.same({ false, "paced" }, { pc:allow() })
      -- winning hedges: 3 of 13 < 25%, 4 of 14 >= 25%
      for _ = 1, 3 do pc:outcome(1, true) end
      assert.is_true(select(2, pc:share()))
      pc:outcome(1, true)
      assert.is_false(select(2, pc:share()))
      -- losing again; the verdict outlives the window, which then
      -- allows one probe; a probe that wins lifts it
      for _ = 1, 20 do pc:outcome(1, false) end
      assert.is_true(select(2, pc:share()))
      now = now + 11
      assert.is_true(select(2, pc:share()))
      assert.is_true(pc:allow())
      pc:hedged()
      assert.same({ false, "paced" }, { pc:allow() })
      pc:outcome(1, true)
      assert.is_false(select(2, pc:share()))
    end)

    it("is shared by the workers through a dict", function()
      local dict = new_dict()
      local a = hedge.pace { clock = clock, shared = dict, key = "api" }
      local b = hedge.pace { clock = clock, shared = dict, key = "api" }
      a:hedged()
      b:hedged()
      assert.same({ false, "paced" }, { a:allow() })
      b:pause(2)
      now = now + 1.5
      assert.same({ false, "pushback" }, { a:allow() })
      for _ = 1, 10 do a:outcome(1, false) end
      assert.is_true(select(2, b:share()))
      local c = hedge.pace { clock = clock, shared = dict, key = "other" }
      assert.is_false(select(2, c:share()))
    end)

    it("in hedge.request: an upstream slow for everyone gets next to "
       .. "no hedges", function()
      local pc = hedge.pace { clock = fake.clock, shared = false }
      local u = upstream(fake, { { 0.3, { 200 } } })
      local calls = {}
      for i = 1, 60 do
        local before = u.calls
        assert.equal(200, hedge.request(p, u.fn, opts { pace = pc }))
        calls[i] = u.calls - before
      end
      -- hedges lost: ten of them, then they stopped (a probe every
      -- window at most)
      local late = 0
      for i = 31, 60 do late = late + calls[i] - 1 end
      assert.is_true(u.calls - 60 <= 12, u.calls - 60)
      assert.equal(0, late)
      assert.is_true(select(2, pc:share()))
    end)

    it("in hedge.request: hedges that win go on", function()
      local pc = hedge.pace { clock = fake.clock, shared = false }
      local u = upstream(fake, { { 1, { 200 } }, { 0.01, { 201 } } })
      local won = 0
      for _ = 1, 30 do
        if hedge.request(p, u.fn, opts { pace = pc }) == 201 then
          won = won + 1
        end
      end
      -- every hedge won; about 2 a second (the burst: 100% of these
      -- requests are slow, the pace allows 10% or 2 a second)
      assert.equal(won, u.calls - 30)
      assert.is_true(won >= 10, won)
      assert.is_false(select(2, pc:share()))
    end)

    it("the default: one per worker and budget, at the budget's percent",
      function()
        local bud = require("backoff.budget").ratio { percent = 10,
          min_per_second = 1, clock = fake.clock, shared = false }
        local u = upstream(fake, { { 1, { 200 } }, { 0.01, { 201 } } })
        -- the budget's reserve allows 10; the default pace 2 in the
        -- first second (no history)
        local got = {}
        for i = 1, 3 do
          got[i] = hedge.request(p, u.fn, opts { budget = bud })
        end
        assert.same({ 201, 201, 200 }, got)
      end)

    it("refuses bad options and arguments", function()
      local e = "backoff.hedge.pace: option '"
      for _, c in ipairs {
        { { percent = 101 }, e .. "percent' must be a number >= 0 and "
          .. "<= 100 (got 101)" },
        { { burst = -1 }, e .. "burst'" },
        { { window = 0 }, e .. "window'" },
        { { min_win = 2 }, e .. "min_win'" },
        { { probe = "x" }, e .. "probe'" },
        { { shared = "hedge" }, e .. "shared' must be an ngx.shared dict" },
        { { key = "k", shared = false }, "option 'key' names keys in a dict" },
        { { bogus = 1 }, "backoff.hedge.pace: unknown option 'bogus'" },
      } do
        local ok, err = pcall(hedge.pace, c[1])
        assert.is_false(ok)
        assert.matches(c[2], err, 1, true)
      end
      local pc = hedge.pace { shared = false }
      assert.error_matches(function() pc:pause(-1) end,
        "bad argument #1 to 'pause'", nil, true)
      assert.error_matches(function() pc:outcome(0) end,
        "bad argument #1 to 'outcome'", nil, true)
      assert.error_matches(function() pc.allow({}) end,
        "calling 'allow' on bad self", nil, true)
      assert.matches("backoff.hedge.pace: 10% of the requests",
                     tostring(pc), 1, true)
    end)
  end)
end)
