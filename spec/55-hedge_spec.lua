-- backoff.hedge: hedged requests, against a fake ngx whose light
-- threads run in virtual time (spec/fake_ngx_threads.lua).  The real
-- nginx side is spec/nginx/hedge.lua.
local backoff = require "backoff"
local hedge = require "backoff.hedge"
local metrics = require "backoff.metrics"
local budget = require "backoff.budget"

local root = (debug.getinfo(1, "S").source:match("^@(.-)[^/]*$") or "./")
local new_fake = dofile(root .. "fake_ngx_threads.lua")
local new_dict = dofile(root .. "budget_dict.lua")

local function pack(...) return { n = select("#", ...), ... } end
local unpack = table.unpack or unpack  -- luacheck: ignore 143

local function res(status, headers, body)
  return { status = status, headers = headers or {}, body = body }
end

-- An upstream answering each attempt as scripted: { latency, results
-- (a table of do_request's results) }; the last entry repeats.  It
-- logs what happened: "start 1", "read 1" (an answer read), "close 1"
-- (the socket a copy registered was closed), and keeps each copy's
-- timeouts and cancel token.
local function upstream(fake, script)
  local u = { log = {}, starts = {}, timeouts = {}, tokens = {}, calls = 0 }
  local function log(s) u.log[#u.log + 1] = s end
  u.fn = function(attempt, t, cancel)
    u.calls = u.calls + 1
    u.starts[attempt], u.timeouts[attempt] = fake.t, t
    u.tokens[attempt] = cancel
    log("start " .. attempt)
    local sock = { close = function() log("close " .. attempt) end }
    assert(cancel:on_cancel(sock) == sock)
    local s = script[attempt] or script[#script]
    fake.sleep(s[1])
    log("read " .. attempt)
    local r = s[2]
    if type(r) == "function" then return r(attempt) end
    return unpack(r, 1, r.n or #r)
  end
  return u
end

-- a budget that records every call: grant = how many withdrawals it
-- grants (nil: all)
local function spy_budget(grant)
  local b = { calls = {} }
  local function log(...) b.calls[#b.calls + 1] = { ... } end
  function b.withdraw(_, cost)
    log("withdraw", cost)
    if grant == nil then return true end
    if grant > 0 then grant = grant - 1 return true end
    return false
  end
  function b.record(_, ok, attempt, cost) log("record", ok, attempt, cost) end
  function b.deposit(_, n) log("deposit", n) end
  function b.allows() return grant == nil or grant > 0 end
  return b
end

-- a breaker: `open` refuses every allow; `grant` allows that many
local function spy_breaker(grant)
  local k = { calls = {}, n = 0 }
  local function log(...) k.calls[#k.calls + 1] = { ... } end
  function k.allow()
    if grant and grant <= 0 then log("refuse") return false end
    if grant then grant = grant - 1 end
    k.n = k.n + 1
    log("allow", "t" .. k.n)
    return true, "t" .. k.n
  end
  function k.record(_, ok, ticket, seconds)
    log("record", ok, ticket, math.floor(seconds * 1000 + 0.5))
  end
  function k.release(_, ticket) log("release", ticket) end
  function k.allows() return not grant or grant > 0 end
  return k
end

describe("backoff.hedge", function()
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

  describe("hedging", function()
    it("sends nothing more when the first copy answers within the delay",
      function()
        local u = upstream(fake, { { 0.01, { res(200), "extra" } } })
        local r = pack(hedge.request(p, u.fn, opts()))
        assert.equal(2, r.n)
        assert.equal(200, r[1].status)
        assert.equal("extra", r[2])
        assert.same({ "start 1", "read 1" }, u.log)
        assert.equal(0, fake.running())
        assert.near(1000.01, fake.t, 1e-9)
      end)

    it("starts a copy after the delay; the first answer wins and the "
       .. "others are cancelled at once, nothing read after", function()
        local u = upstream(fake, { { 1, { res(200, nil, "slow") } },
                                   { 0.01, { res(200, nil, "fast") } } })
        local r = pack(hedge.request(p, u.fn, opts()))
        assert.equal("fast", r[1].body)
        assert.near(1000.06, fake.t, 1e-9)
        assert.same({ "start 1", "start 2", "read 2", "close 1" }, u.log)
        assert.is_true(u.tokens[1].cancelled)
        assert.is_false(u.tokens[2].cancelled)
        assert.equal(1, fake.killed - 1)      -- copy 1, and the sleeper
        assert.equal(0, fake.running())
        -- the loser's thread never runs again
        fake.sleep(5)
        assert.same({ "start 1", "start 2", "read 2", "close 1" }, u.log)
      end)

    it("keeps up to max_attempts copies in flight, one more per delay",
      function()
        local u = upstream(fake, { { 1, { res(200, nil, "1") } },
                                   { 0.9, { res(200, nil, "2") } },
                                   { 0.5, { res(200, nil, "3") } } })
        local r = pack(hedge.request(p, u.fn, opts()))
        assert.equal("3", r[1].body)
        assert.near(1000, u.starts[1], 1e-9)
        assert.near(1000.05, u.starts[2], 1e-9)
        assert.near(1000.1, u.starts[3], 1e-9)
        assert.near(1000.6, fake.t, 1e-9)
        assert.same({ "start 1", "start 2", "start 3", "read 3", "close 2",
                      "close 1" }, u.log)
        assert.equal(0, fake.running())
      end)

    it("with delay 0 sends every copy at once", function()
      local u = upstream(fake, { { 0.3, { 200 } }, { 0.2, { 201 } },
                                 { 0.1, { 202 } } })
      assert.equal(202, hedge.request(p, u.fn, opts { delay = 0 }))
      assert.same({ 1000, 1000, 1000 }, u.starts)
    end)

    it("passes each copy its per-try timeouts, cut to the deadline",
      function()
        p = backoff.constant { delay = 0, max_attempts = 3,
          clock = fake.clock, max_actual_duration = 1,
          adjust_timeout_factor = 0.5, min_adjust_timeout = 0.01 }
        local u = upstream(fake, { { 0.9, { 200 } } })
        hedge.request(p, u.fn, opts { delay = 0.2,
          timeouts = { connect = 0.5, read = 1, send = false } })
        local t1, t2 = u.timeouts[1], u.timeouts[2]
        assert.same({ connect = 250, read = 500, timeout = 0.5 }, t1)
        assert.is_true(t2.timeout <= 0.8 + 1e-9)
        assert.is_nil(t2.send)
      end)

    it("gives up at the deadline, cancelling what is in flight",
      function()
        p = backoff.constant { delay = 0, max_attempts = 3,
          clock = fake.clock, max_actual_duration = 0.3 }
        local u = upstream(fake, { { 10, { 200 } } })
        local r = pack(hedge.request(p, u.fn, opts { delay = 0.1 }))
        assert.same({ n = 4, nil, "timeout", "max_actual_duration" }, r)
        assert.near(1000.3, fake.t, 1e-6)
        assert.same({ "start 1", "start 2", "start 3", "close 3", "close 2",
                      "close 1" }, u.log)
        assert.is_true(u.timeouts[3].timeout <= 0.1 + 1e-9)
        assert.equal(0, fake.running())
      end)
  end)

  describe("answers and failures (backoff.http's rules)", function()
    it("a retryable failure lets another copy start at once", function()
      local u = upstream(fake, { { 0.01, { res(503) } },
                                 { 0.01, { nil, "connection reset" } },
                                 { 0.01, { res(200, nil, "3") } } })
      local r = hedge.request(p, u.fn, opts { delay = 1 })
      assert.equal("3", r.body)
      assert.near(1000.01, u.starts[2], 1e-9)
      assert.near(1000.02, u.starts[3], 1e-9)
    end)

    it("a status that is not retried ends the request as it came",
      function()
        local u = upstream(fake, { { 1, { res(200) } },
                                   { 0.01, { res(404, nil, "no") } } })
        local r = hedge.request(p, u.fn, opts())
        assert.equal(404, r.status)
        assert.same({ "start 1", "start 2", "read 2", "close 1" }, u.log)
        u = upstream(fake, { { 0.01, { res(500) } } })
        assert.equal(500, hedge.request(p, u.fn, opts()).status)
        assert.equal(1, u.calls)
      end)

    it("gives up after max_attempts failures, with the last response",
      function()
        local u = upstream(fake, { { 0.01, { res(503, nil, "busy") } } })
        local r = pack(hedge.request(p, u.fn, opts()))
        assert.equal(4, r.n)
        assert.same({ nil, "HTTP 503", "max_attempts" }, { r[1], r[2], r[3] })
        assert.equal("busy", r[4].body)
        assert.equal(3, u.calls)
      end)

    it("waits for the server's hint before the next copy; a hint over "
       .. "max_hint starts none", function()
        local u = upstream(fake, { { 0.01, { res(503,
          { ["Retry-After"] = "2" }) } }, { 0.01, { res(200) } } })
        assert.equal(200, hedge.request(p, u.fn, opts { delay = 5 }).status)
        assert.near(1002.01, u.starts[2], 1e-9)
        u = upstream(fake, { { 0.01, { res(503,
          { ["Retry-After"] = "120" }) } }, { 0.01, { res(200) } } })
        local r = pack(hedge.request(p, u.fn, opts { max_hint = 10 }))
        assert.same({ nil, "HTTP 503", "retry_after" }, { r[1], r[2], r[3] })
        assert.equal(1, u.calls)
      end)

    it("a hint past the deadline starts no copy", function()
      p = backoff.constant { delay = 0, max_attempts = 3,
        clock = fake.clock, max_actual_duration = 1 }
      local u = upstream(fake, { { 0.01, { res(429,
        { ["Retry-After"] = "2" }) } } })
      -- (a delay below the deadline: one at or past it is refused)
      local r = pack(hedge.request(p, u.fn, opts { delay = 0.9 }))
      assert.same({ nil, "HTTP 429", "max_actual_duration" },
                  { r[1], r[2], r[3] })
      assert.equal(1, u.calls)
    end)

    it("an error do_request raises is raised again, the others cancelled",
      function()
        local u = upstream(fake, { { 1, { 200 } },
          { 0.01, function() error({ code = "bug" }) end } })
        local ok, e = pcall(hedge.request, p, u.fn, opts())
        assert.is_false(ok)
        assert.same({ code = "bug" }, e)
        assert.is_true(u.tokens[1].cancelled)
        assert.equal(0, fake.running())
      end)

    it("an error do_request raises counts nothing, as in every door",
      function()
        local m = metrics.new("raised", { shared = false })
        local u = upstream(fake, { { 0.01, function() error("bug") end } })
        local ok = pcall(hedge.request, p, u.fn, opts { metrics = m })
        assert.is_false(ok)
        local c = m:counts()
        assert.equal(0, c.successes)
        assert.same({}, c.giveups)
      end)

    it("a result of the wrong shape raises naming do_request", function()
      local u = upstream(fake, { { 0.01, { "yes" } } })
      assert.error_matches(function() hedge.request(p, u.fn, opts()) end,
        "backoff.hedge.request: do_request must return a response", nil,
        true)
      u = upstream(fake, { { 0.01, { { status = "200" } } } })
      assert.error_matches(function() hedge.request(p, u.fn, opts()) end,
        "without a numeric 'status'", nil, true)
    end)
  end)

  describe("idempotency", function()
    it("never hedges a POST: one copy, in the caller's own coroutine",
      function()
        local u = upstream(fake, { { 1, { res(200) } } })
        local r = hedge.request(p, u.fn, opts { method = "POST" })
        assert.equal(200, r.status)
        assert.same({ "start 1", "read 1" }, u.log)
        assert.equal(0, fake.spawned)
        u = upstream(fake, { { 0.01, { res(503) } } })
        r = pack(hedge.request(p, u.fn, opts { method = "POST" }))
        assert.same({ nil, "HTTP 503", "not_idempotent" },
                    { r[1], r[2], r[3] })
        assert.equal(1, u.calls)
      end)

    it("tries a POST again only when it certainly was not sent",
      function()
        local u = upstream(fake, { { 0, { nil, "connection refused" } },
          { 0, { nil, "timeout", "connect" } },
          { 0.01, { res(201) } } })
        local r = hedge.request(p, u.fn, opts { method = "POST" })
        assert.equal(201, r.status)
        assert.equal(3, u.calls)
        assert.equal(0, fake.spawned)
      end)

    it("hedges a POST with an Idempotency-Key, or idempotent = true; "
       .. "not a GET with idempotent = false", function()
        local function slow_first()
          return upstream(fake, { { 1, { 200 } }, { 0.01, { 201 } } })
        end
        local u = slow_first()
        assert.equal(201, hedge.request(p, u.fn, opts { method = "POST",
          headers = { ["idempotency-key"] = "k1" } }))
        u = slow_first()
        assert.equal(201, hedge.request(p, u.fn, opts { method = "POST",
          idempotent = true }))
        u = slow_first()
        assert.equal(200, hedge.request(p, u.fn, opts { method = "GET",
          idempotent = false }))
        assert.equal(1, u.calls)
        u = slow_first()
        assert.equal(201, hedge.request(p, u.fn,     -- ngx.HTTP_GET
          opts { method = 2, pace = false }))  -- the 3rd hedge in 1 s
      end)
  end)

  describe("the budget", function()
    it("pays every copy after the first as a retry and records the "
       .. "winner; nothing for a cancelled copy", function()
        local b = spy_budget()
        local u = upstream(fake, { { 1, { 200 } }, { 0.01, { 201 } } })
        hedge.request(p, u.fn, opts { budget = b })
        assert.same({ { "withdraw" }, { "record", true, 2 } }, b.calls)
        b = spy_budget()
        u = upstream(fake, { { 0.01, { 503 } }, { 0.01, { 200 } } })
        hedge.request(p, u.fn, opts { budget = b })
        assert.same({ { "record", false, 1 }, { "withdraw" },
                      { "record", true, 2 } }, b.calls)
      end)

    it("a refusal turns hedging off for the request", function()
      local b = spy_budget(0)
      local m = metrics.new("refused", { shared = false })
      local u = upstream(fake, { { 1, { 200 } }, { 0.01, { 201 } } })
      assert.equal(200, hedge.request(p, u.fn,
        opts { budget = b, metrics = m }))
      assert.same({ "start 1", "read 1" }, u.log)
      assert.same({ { "withdraw" }, { "record", true, 1 } }, b.calls)
      assert.equal(1, m:counts().hedge_budget_refusals)
      -- nor is a failed copy replaced then
      b = spy_budget(0)
      u = upstream(fake, { { 1, { 503 } }, { 0.01, { 201 } } })
      local r = pack(hedge.request(p, u.fn, opts { budget = b }))
      assert.same({ nil, "HTTP 503", "budget" }, { r[1], r[2], r[3] })
      assert.equal(1, u.calls)
    end)

    it("a copy after a server's hint costs the budget's throttle_cost",
      function()
        local b = spy_budget()
        function b.throttle_cost() return 9 end
        local u = upstream(fake, { { 0.01, { res(503,
          { ["Retry-After"] = "1" }) } }, { 0.01, { 200 } } })
        hedge.request(p, u.fn, opts { budget = b, delay = 5 })
        assert.same({ "withdraw", 9 }, b.calls[2])
        assert.same({ "record", true, 2, 9 }, b.calls[3])
      end)

    it("a budget of any kind that refuses stops hedging", function()
      -- (per worker on purpose: the fake nginx has no shared dict)
      local f = false
      local kinds = {
        token_bucket = budget.token_bucket { capacity = 3, cost = 1,
                                             shared = f },
        ratio = budget.ratio { percent = 10, clock = fake.clock, shared = f },
        earned = budget.earned { capacity = 2, clock = fake.clock,
                                 shared = f },
        grpc = budget.grpc { max_tokens = 4, token_ratio = 0.1, shared = f },
        adaptive = budget.adaptive { k = 1.01, clock = fake.clock,
                                     shared = f },
      }
      for kind, b in pairs(kinds) do
        -- made to refuse: the counting kinds by withdrawals, the kinds
        -- that count failures by failures
        for i = 1, 1000 do
          if kind == "grpc" or kind == "adaptive" then
            b:record(false, i)
          elseif not b:withdraw() then
            break
          end
        end
        assert.is_false(b:allows(), kind)
        local u = upstream(fake, { { 1, { 200 } }, { 0.01, { 201 } } })
        local m = metrics.new("kind " .. kind, { shared = false })
        assert.equal(200, hedge.request(p, u.fn,
          opts { budget = b, metrics = m }), kind)
        assert.equal(1, u.calls, kind)
        assert.equal(1, m:counts().hedge_budget_refusals, kind)
      end
    end)

    it("the counting kinds bound the hedges of an upstream slow for "
       .. "everyone", function()
        -- ratio: at most percent% of the requests; the token bucket:
        -- capacity, then refund / cost of them (a hedge that lost is not
        -- given back, the first copy's success is)
        local n = 100
        local cases = {
          { budget.ratio { percent = 10, min_per_second = 0, window = 60,
                           clock = fake.clock, shared = false }, n / 10,
            "ratio" },
          { budget.token_bucket { capacity = 10, cost = 5, refund = 1,
                                  shared = false },
            (10 + n) / 5, "token bucket" },
        }
        for _, c in ipairs(cases) do
          local sent = 0
          for _ = 1, n do
            local u = upstream(fake, { { 0.2, { 200 } } })
            -- the budget's bound alone (hedge.pace would stop these
            -- losing hedges sooner: spec/56)
            hedge.request(p, u.fn, opts { budget = c[1], pace = false })
            sent = sent + u.calls
          end
          assert.is_true(sent - n <= c[2] and sent - n >= c[2] - 2,
                         c[3] .. ": " .. (sent - n))
        end
      end)
  end)

  describe("the breaker", function()
    it("an open breaker sends nothing: reason circuit_open", function()
      local k = spy_breaker(0)
      local u = upstream(fake, { { 0.01, { 200 } } })
      local r = pack(hedge.request(p, u.fn, opts { breaker = k }))
      assert.same({ n = 4, nil, nil, "circuit_open", nil }, r)
      assert.equal(0, u.calls)
    end)

    it("is asked for every copy, told each outcome, a cancelled copy "
       .. "released", function()
        local k = spy_breaker()
        local u = upstream(fake, { { 1, { 200 } }, { 0.01, { 503 } },
                                   { 0.02, { 201 } } })
        assert.equal(201, hedge.request(p, u.fn, opts { breaker = k }))
        assert.same({ { "allow", "t1" }, { "allow", "t2" },
          { "record", false, "t2", 10 }, { "allow", "t3" },
          { "record", true, "t3", 20 }, { "release", "t1" } }, k.calls)
      end)

    it("a breaker that refuses a hedge ends hedging", function()
      local k = spy_breaker(1)
      local u = upstream(fake, { { 0.3, { 200 } }, { 0.01, { 201 } } })
      assert.equal(200, hedge.request(p, u.fn, opts { breaker = k }))
      assert.equal(1, u.calls)
    end)
  end)

  describe("metrics and hooks", function()
    it("count hedges started, won, cancelled, and the run", function()
      local m = metrics.new("hedge spec", { shared = false })
      local u = upstream(fake, { { 1, { 200 } }, { 0.01, { 201 } } })
      hedge.request(p, u.fn, opts { metrics = m })
      u = upstream(fake, { { 0.01, { 200 } } })
      hedge.request(p, u.fn, opts { metrics = m })
      u = upstream(fake, { { 0.01, { 503 } }, { 1, { 503 } },
                           { 0.01, { 200 } } })
      hedge.request(p, u.fn, opts { metrics = m, delay = 0.02 })
      local c = m:counts()
      -- every copy is an attempt; after the first, a retry
      assert.same({ 6, 3, 3, 2 }, { c.attempts, c.retries, c.successes,
        c.successes_after_retry })
      assert.same({ 2, 2, 2, 0 }, { c.hedges, c.hedges_won,
        c.hedges_cancelled, c.hedge_budget_refusals })
    end)

    it("on_hedge(err, attempt, res) before each copy after the first; "
       .. "on_giveup(err, reason, attempts, res)", function()
        local seen = {}
        local u = upstream(fake, { { 0.01, { res(503, nil, "b") } },
                                   { 1, { nil, "timeout" } },
                                   { 1, { 502 } } })
        local r = pack(hedge.request(p, u.fn, opts {
          on_hedge = function(err, attempt, rs)
            seen[#seen + 1] = { "hedge", err, attempt, rs and rs.body }
          end,
          on_giveup = function(err, reason, attempts, rs)
            seen[#seen + 1] = { "giveup", err, reason, attempts, rs }
          end }))
        assert.same({ nil, "HTTP 502", "max_attempts" }, { r[1], r[2], r[3] })
        assert.same({ { "hedge", "HTTP 503", 2, "b" }, { "hedge", nil, 3 },
          { "giveup", "HTTP 502", "max_attempts", 3, 502 } }, seen)
      end)
  end)

  describe("where it runs", function()
    it("raises outside nginx, naming what it needs", function()
      rawset(_G, "ngx", nil)
      local u = upstream(fake, { { 0, { 200 } } })
      assert.error_matches(function() hedge.request(p, u.fn, opts()) end,
        "backoff.hedge.request: needs nginx's light threads "
        .. "(ngx.thread.spawn)", nil, true)
      assert.equal(0, u.calls)
    end)

    it("raises in a phase that cannot spawn light threads, naming it",
      function()
        for _, phase in ipairs { "set", "header_filter", "body_filter",
            "log", "balancer", "init", "init_worker", "exit_worker",
            "ssl_session_store" } do
          fake.phase = phase
          local u = upstream(fake, { { 0, { 200 } } })
          for _, method in ipairs { "GET", "POST" } do
            local ok, err = pcall(function()
              hedge.request(p, u.fn, opts { method = method })
            end)
            assert.is_false(ok)
            assert.matches("backoff.hedge.request: cannot hedge in "
              .. "nginx's " .. phase .. " phase", err, 1, true)
            assert.matches("55%-hedge_spec%.lua:%d+:", err)
          end
          assert.equal(0, u.calls)
        end
        for _, phase in ipairs { "rewrite", "server_rewrite", "access",
            "content", "timer", "ssl_cert", "ssl_session_fetch",
            "ssl_client_hello", "preread" } do
          fake.phase = phase
          local u = upstream(fake, { { 0, { 200 } } })
          assert.equal(200, hedge.request(p, u.fn, opts()))
        end
      end)
  end)

  describe("arguments", function()
    local function fails(o, text, pol)
      local u = upstream(fake, { { 0, { 200 } } })
      local ok, err = pcall(function()
        hedge.request(pol or p, u.fn, o)
      end)
      assert.is_false(ok, text)
      assert.matches(text, err, 1, true)
      assert.matches("55%-hedge_spec%.lua:%d+:", err)
      assert.equal(0, u.calls)
    end

    it("refuses bad options at the caller's line, naming them", function()
      local e = "backoff.hedge.request: option '"
      fails(nil, "backoff.hedge.request: options must be a table "
        .. "(got nil)")
      fails(5, "options must be a table (got number)")
      fails({ delay = 0.1, budget = false }, e .. "method' is required")
      fails(opts { method = "GE T" }, e .. "method'")
      fails({ method = "GET", budget = false }, e .. "delay' must be a "
        .. "number of seconds >= 0 or a hedge.latency estimator")
      fails(opts { delay = -1 }, e .. "delay'")
      fails(opts { delay = 0 / 0 }, e .. "delay'")
      fails(opts { delay = { delay = 1 } }, e .. "delay'")
      fails({ method = "GET", delay = 0.1 }, e .. "budget' must be a "
        .. "retry budget")
      fails(opts { budget = {} }, e .. "budget'")
      fails(opts { breaker = { allow = print } }, e .. "breaker'")
      fails(opts { metrics = {} }, e .. "metrics'")
      fails(opts { on_hedge = 1 }, e .. "on_hedge' must be a function")
      fails(opts { on_giveup = "x" }, e .. "on_giveup'")
      fails(opts { statuses = { 99 } }, e .. "statuses'")
      fails(opts { timeouts = { recv = 1 } }, e .. "timeouts'")
      fails(opts { max_hint = -1 }, e .. "max_hint'")
      fails(opts { idempotent = "yes" }, e .. "idempotent'")
      fails(opts { headers = "x" }, e .. "headers'")
      fails(opts { sleep = print }, "backoff.hedge.request: unknown "
        .. "option 'sleep'")
      fails(opts(), "backoff.hedge.request: the policy needs max_attempts",
            backoff.constant { delay = 0 })
      fails(opts(), "backoff.hedge.request: argument 'policy' must be a "
        .. "backoff object or an options table (got number)", 5)
    end)

    it("refuses a do_request that cannot be called", function()
      assert.error_matches(function() hedge.request(p, 5, opts()) end,
        "backoff.hedge.request: argument 'do_request' must be a function "
        .. "(got number)", nil, true)
    end)

    it("takes a policy table", function()
      local u = upstream(fake, { { 1, { 200 } }, { 0.01, { 201 } } })
      assert.equal(201, hedge.request({ strategy = "constant", delay = 0,
        max_attempts = 2, clock = fake.clock }, u.fn, opts()))
    end)

    it("the cancel token refuses what it cannot close", function()
      local u = upstream(fake, { { 0, { 200 } } })
      hedge.request(p, u.fn, opts())
      assert.error_matches(function() u.tokens[1]:on_cancel(5) end,
        "bad argument #1 to 'on_cancel'", nil, true)
      local closed = 0
      u.tokens[1].cancelled = true
      u.tokens[1]:on_cancel(function() closed = closed + 1 end)
      assert.equal(1, closed)
    end)
  end)

  describe("latency", function()
    local function lat(o)
      o = o or {}
      if o.clock == nil then o.clock = fake.clock end
      if o.shared == nil then o.shared = false end
      return hedge.latency(o)
    end

    it("answers max_delay until it has min_samples latencies", function()
      local l = lat { max_delay = 0.5, min_samples = 5 }
      assert.equal(0.5, l:delay())
      for _ = 1, 4 do l:observe(0.002) end
      fake.t = fake.t + 1
      assert.equal(0.5, l:delay())
      l:observe(0.002)
      fake.t = fake.t + 1
      assert.is_true(l:delay() < 0.5)
      assert.equal(5, l:samples())
      -- a cold estimate is read again as soon as this worker taught it
      -- enough, not only when it is due
      l = lat { max_delay = 0.5, min_samples = 5 }
      assert.equal(0.5, l:delay())
      for _ = 1, 5 do l:observe(0.002) end
      assert.is_true(l:delay() < 0.5)
    end)

    it("gives the upper edge of the percentile's bucket, bounded",
      function()
        local l = lat { percentile = 90, min_delay = 0, max_delay = 10 }
        for i = 1, 100 do l:observe(i <= 95 and 0.002 or 0.2) end
        local d = l:delay()
        assert.is_true(d >= 0.002 and d <= 0.002 * 2 ^ 0.25 + 1e-12, d)
        l = lat { percentile = 99, min_delay = 0, max_delay = 10 }
        for i = 1, 100 do l:observe(i <= 95 and 0.002 or 0.2) end
        d = l:delay()
        assert.is_true(d >= 0.2 and d <= 0.2 * 2 ^ 0.25 + 1e-12, d)
        l = lat { percentile = 99, min_delay = 0, max_delay = 0.05 }
        for _ = 1, 100 do l:observe(0.2) end
        assert.equal(0.05, l:delay())
        l = lat { percentile = 50, min_delay = 0.01 }
        for _ = 1, 100 do l:observe(0.001) end
        assert.equal(0.01, l:delay())
      end)

    it("forgets latencies older than the span", function()
      local l = lat { span = 10, min_delay = 0, min_samples = 1 }
      for _ = 1, 50 do l:observe(0.1) end
      fake.t = fake.t + 5
      for _ = 1, 10 do l:observe(0.001) end
      fake.t = fake.t + 1
      assert.is_true(l:delay() >= 0.1)
      fake.t = fake.t + 5
      assert.is_true(l:delay() < 0.002)
      assert.equal(10, l:samples())
    end)

    it("is shared by the workers through the dict, with no lock",
      function()
        local d = new_dict()
        d.now = fake.clock
        local a = lat { shared = d, key = "api", min_delay = 0,
                        min_samples = 1 }
        local b = lat { shared = d, key = "api", min_delay = 0,
                        min_samples = 1 }
        local other = lat { shared = d, key = "other", min_delay = 0,
                            min_samples = 1 }
        for _ = 1, 20 do a:observe(0.05) end
        for _ = 1, 20 do other:observe(0.001) end
        -- a worker's latencies reach the dict in one incr per bucket
        -- (and one per octave), before it reads the histogram or slice
        -- / 8 s later
        assert.equal(0, b:samples())
        local incrs = d.incrs
        a:delay()
        assert.equal(incrs + 2, d.incrs)
        assert.equal(20, b:samples())
        assert.is_true(b:delay() >= 0.05)
        assert.is_true(other:delay() < 0.002)
        incrs = d.incrs
        a:observe(0.05)
        a:observe(0.002)
        assert.equal(incrs, d.incrs)
        fake.t = fake.t + 0.25
        a:observe(0.05)
        assert.equal(incrs + 4, d.incrs)
        assert.equal(22, b:samples())
      end)

    it("reads the dict at most every span / 40 seconds", function()
      local d = new_dict()
      d.now = fake.clock
      local l = lat { shared = d, min_samples = 1, min_delay = 0 }
      l:observe(0.01)
      local first = l:delay()
      local gets = d.gets
      for _ = 1, 100 do l:observe(1) assert.equal(first, l:delay()) end
      assert.equal(gets, d.gets)
      fake.t = fake.t + 0.25
      assert.is_true(l:delay() > first)
    end)

    it("sets the hedging delay of a request", function()
      local l = lat { min_samples = 1, min_delay = 0 }
      for _ = 1, 10 do l:observe(0.03) end
      local want = l:delay()
      local u = upstream(fake, { { 1, { 200 } }, { 0.01, { 201 } } })
      hedge.request(p, u.fn, opts { delay = l })
      assert.near(1000 + want, u.starts[2], 1e-9)
      -- the winner's latency is learnt; the loser ran past the delay:
      -- counted too, as a lower bound
      assert.equal(12, l:samples())
    end)

    it("refuses bad options and arguments", function()
      local e = "backoff.hedge.latency: option '"
      local f = false                 -- shared = false: per worker
      local cases = {
        { { percentile = 0 }, e .. "percentile' must be a number > 0" },
        { { percentile = 101 }, e .. "percentile'" },
        { { min_delay = -1 }, e .. "min_delay'" },
        { { max_delay = 0 }, e .. "max_delay'" },
        { { min_delay = 2, max_delay = 1, shared = f }, e .. "min_delay' "
          .. "must be <= max_delay" },
        { { span = 0.5 }, e .. "span'" },
        { { min_samples = 1.5 }, e .. "min_samples'" },
        { { clock = 1 }, e .. "clock'" },
        { { key = "k" }, e .. "shared' must be an ngx.shared dict inside "
          .. "nginx (got nil" },
        { { shared = {} }, e .. "shared'" },
        { { shared = new_dict(), key = "" }, e .. "key'" },
        { { nope = 1 }, "backoff.hedge.latency: unknown option 'nope'" },
        { 5, "backoff.hedge.latency: options must be a table" },
      }
      for _, c in ipairs(cases) do
        local ok, err = pcall(function() hedge.latency(c[1]) end)
        assert.is_false(ok, c[2])
        assert.matches(c[2], err, 1, true)
        assert.matches("55%-hedge_spec%.lua:%d+:", err)
      end
      -- inside nginx, shared is required (false: per worker)
      assert.error_matches(function() hedge.latency() end,
        "option 'shared' must be an ngx.shared dict inside nginx", nil,
        true)
      assert.has_no.errors(function() hedge.latency { shared = false } end)
      -- outside nginx, no dict is needed: per process
      rawset(_G, "ngx", nil)
      local own = hedge.latency { min_samples = 1, min_delay = 0 }
      own:observe(0.01)
      assert.equal(1, own:samples())
      assert.error_matches(function() hedge.latency { key = "k" } end,
        "option 'key' names keys in a dict, so it needs option 'shared'",
        nil, true)
      rawset(_G, "ngx", fake)
      local l = lat()
      for _, v in ipairs { -1, 0 / 0, 1 / 0, "1" } do
        assert.error_matches(function() l:observe(v) end,
          "bad argument #1 to 'observe'", nil, true)
      end
      assert.equal(0, l:samples())
      assert.error_matches(function() l.delay({}) end, "calling 'delay' "
        .. "on bad self", nil, true)
    end)
  end)

  describe("the reference", function()
    it("documents every function, with its context", function()
      local f = io.open(root .. "../doc/hedge.md")
      if not f then
        pending("doc/ is not in this copy of the tree")
        return
      end
      local doc = f:read("*a")
      f:close()
      local names = { "hedge.request(", "hedge.latency(", "lat:delay(",
        "lat:observe(", "lat:samples(", "cancel:on_cancel(", "hedge.pace(",
        "pace:allow(" }
      for k, v in pairs(hedge) do
        if type(v) == "function" then
          local found = false
          for _, n in ipairs(names) do
            if n == "hedge." .. k .. "(" then found = true end
          end
          assert.is_true(found, k)
        end
      end
      for _, n in ipairs(names) do
        local at = doc:find("%*%*syntax:%*%* `[^`]*"
                            .. n:gsub("[%.%:%(]", "%%%0"))
        assert.truthy(at, n)
        local ctx = doc:find("**context:**", at, true)
        local nxt = doc:find("\n## ", at + 1, true) or #doc
        assert.truthy(ctx and ctx < nxt, n)
      end
    end)
  end)
end)
