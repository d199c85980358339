-- The real backoff.breaker through the three doors of the retry engine:
-- backoff.retry, backoff.http.request and backoff.balancer (ngx and
-- ngx.balancer faked as in spec/32).  While it is open, a run makes no
-- attempt, spends no budget and gives up with reason "circuit_open";
-- a retry it refuses is not paid for; half-open, the run's attempt is
-- the probe, and its outcome decides.
local backoff = require "backoff"
local http = require "backoff.http"
local metrics = require "backoff.metrics"
local new_dict = dofile("spec/breaker_dict.lua")

local function world()
  local w = { t = 1000 }
  w.clock = function() return w.t end
  w.sleep = function(d) w.t = w.t + d end
  w.dict = new_dict(w.clock)
  return w
end

local function make(w, o)
  local opts = { shared = w.dict, key = "api", clock = w.clock,
    policy = backoff.constant { delay = 2 } }
  for k, v in pairs(o or {}) do opts[k] = v end
  return backoff.breaker.new(opts)
end

-- a budget that logs every call
local function logging_budget()
  local bud = { log = {} }
  local function log(...) bud.log[#bud.log + 1] = table.concat({ ... }, " ") end
  function bud.withdraw(_, c) log("withdraw", tostring(c)) return true end
  function bud.allows() return true end
  function bud.record(_, ok, attempt)
    log("record", tostring(ok), tostring(attempt))
  end
  function bud.deposit(_, n) log("deposit", tostring(n)) end
  return bud
end

describe("the breaker through backoff.retry", function()
  local w, p
  before_each(function()
    w = world()
    p = backoff.constant { delay = 0.1, max_attempts = 5, clock = w.clock }
    metrics.reset()
  end)

  it("trips during a run: the retry it refuses is not made or paid",
    function()
      local br = make(w, { failures = 2 })
      local bud = logging_budget()
      local m = metrics.new("doors1", { shared = false })
      local calls = 0
      local res, err, reason = backoff.retry(p, function()
        calls = calls + 1
        w.t = w.t + 0.05
        return nil, "boom"
      end, { breaker = br, budget = bud, sleep = w.sleep, metrics = m })
      assert.same({ nil, "boom", "circuit_open" }, { res, err, reason })
      assert.equal(2, calls)
      assert.equal("open", (br:state()))
      -- one retry paid (the second attempt), none for the refused third
      assert.same({ "record false 1", "withdraw nil", "record false 2" },
                  bud.log)
      assert.equal(1, m:counts().giveups.circuit_open)
    end)

    it("while open: no attempt, no budget, reason circuit_open, counted",
      function()
        local br = make(w, { failures = 1 })
        br:record(false)
        local bud = logging_budget()
        local m = metrics.new("doors2", { shared = false })
        local giveup
        local calls = 0
        local res, err, reason = backoff.retry(p, function()
          calls = calls + 1
          return true
        end, { breaker = br, budget = bud, metrics = m,
               on_giveup = function(e, r, a) giveup = { e, r, a } end })
        assert.same({ nil, "circuit open: no attempt was made",
                      "circuit_open" }, { res, err, reason })
        assert.equal(0, calls)
        assert.same({}, bud.log)
        assert.same({ "circuit open: no attempt was made", "circuit_open",
                      0 }, giveup)
        local c = m:counts()
        assert.same({ 0, 1 }, { c.attempts, c.giveups.circuit_open })
      end)

    it("half-open: the run's first attempt is the probe; its success "
       .. "closes it, and the time it took is the slow-call measure",
      function()
        local br = make(w, { failures = 1, slow_call_duration = 1 })
        br:record(false)
        w.t = w.t + 2
        -- a slow success: the probe fails, it reopens; the run succeeded
        local r = backoff.retry(p, function()
          w.t = w.t + 1.5
          return "slow"
        end, { breaker = br })
        assert.equal("slow", r)
        local s, info = br:state()
        assert.same({ "open", 2 }, { s, info.opening })
        w.t = w.t + 2
        r = backoff.retry(p, function()
          w.t = w.t + 0.1
          return "fast"
        end, { breaker = br })
        assert.equal("fast", r)
        assert.equal("closed", (br:state()))
      end)

    it("half-open: a failed probe reopens it and ends the run", function()
      local br = make(w, { failures = 1 })
      br:record(false)
      w.t = w.t + 2
      local calls = 0
      local _, _, reason = backoff.retry(p, function()
        calls = calls + 1
        return nil, "still down"
      end, { breaker = br, sleep = w.sleep })
      assert.equal(1, calls)
      assert.equal("circuit_open", reason)
      local _, info = br:state()
      assert.equal(2, info.opening)
    end)

    it("a caller's error (retry_on says no) gives the probe back",
      function()
        local br = make(w, { failures = 1 })
        br:record(false)
        w.t = w.t + 2
        local _, _, reason = backoff.retry(p, function()
          return nil, "bad request"
        end, { breaker = br, retry_on = function() return false end })
        assert.equal("retry_on", reason)
        assert.equal("half_open", (br:state()))
        local ok, ticket = br:allow()       -- the slot is free
        assert.is_true(ok)
        assert.is_not_nil(ticket)
      end)
end)

describe("the breaker through backoff.http.request", function()
  it("makes no request while open; retries 503s and trips", function()
    local w = world()
    local p = backoff.constant { delay = 0.1, max_attempts = 4,
                                 clock = w.clock }
    local br = make(w, { failures = 3 })
    local bud = logging_budget()
    local sent = 0
    local function do_request()
      sent = sent + 1
      return { status = 503, headers = {} }
    end
    local opts = { breaker = br, budget = bud, sleep = w.sleep,
                   method = "GET" }
    local res, _, reason = http.request(p, do_request, opts)
    assert.equal(3, sent)
    assert.equal("circuit_open", reason)
    assert.is_nil(res)
    assert.equal("open", (br:state()))
    local paid = #bud.log
    res, _, reason = http.request(p, do_request, opts)
    assert.same({ nil, "circuit_open", 3, paid }, { res, reason, sent,
                                                     #bud.log })
  end)
end)

describe("the breaker through backoff.balancer", function()
  local balancer, calls, fake
  local saved_ngx = rawget(_G, "ngx")

  before_each(function()
    calls = { more = 0 }
    package.loaded["ngx.balancer"] = {
      set_timeouts = function() return true end,
      set_more_tries = function()
        calls.more = calls.more + 1
        return true
      end,
    }
    package.loaded["backoff.balancer"] = nil
    balancer = require "backoff.balancer"
    fake = { ctx = {}, phase = "balancer", status = 200, exits = {} }
    fake.get_phase = function() return fake.phase end
    fake.exit = function(code) fake.exits[#fake.exits + 1] = code end
    rawset(_G, "ngx", fake)
  end)

  after_each(function()
    package.loaded["ngx.balancer"] = nil
    rawset(_G, "ngx", saved_ngx)
  end)

  local function new_request()
    fake.ctx, fake.phase, fake.status = {}, "balancer", 200
  end

  it("grants no retry and starts no try while open; no budget spent",
    function()
      local w = world()
      local p = backoff.constant { delay = 0, max_attempts = 3 }
      local br = make(w, { failures = 2 })
      local bud = logging_budget()
      local opts = { breaker = br, budget = bud }
      -- a request whose two tries fail: the second trips it
      assert.is_true((balancer(p, opts)))
      assert.equal(1, calls.more)              -- try 2 granted, paid
      local ok, attempt = balancer(p, opts)
      assert.same({ true, 2 }, { ok, attempt })
      fake.phase, fake.status = "log", 502
      balancer.done(opts)
      assert.equal("open", (br:state()))
      -- the grant for a third try was asked while still closed
      assert.equal(2, calls.more)
      local before = #bud.log
      -- a new request while open: refused before any try, nothing paid
      new_request()
      assert.same({ nil, "circuit_open" }, { balancer(p, opts) })
      assert.equal(2, calls.more)
      assert.equal(before, #bud.log)
    end)

    it("does not grant the next try once it is open", function()
      local w = world()
      local p = backoff.constant { delay = 0, max_attempts = 3 }
      local br = make(w, { failures = 1 })
      local opts = { breaker = br }
      assert.is_true((balancer(p, opts)))      -- granted while closed
      assert.equal(1, calls.more)
      br:record(false)                         -- another request trips it
      -- the try nginx starts for the grant: made, or refused with nginx
      -- told to answer 502 (ngx.exit(NGX_BUSY)); never a third grant
      local ok, attempt = balancer(p, opts)
      if ok then
        assert.equal(2, attempt)
      else
        assert.equal("circuit_open", attempt)
        assert.same({ -3 }, fake.exits)
      end
      assert.equal(1, calls.more)
    end)
end)
