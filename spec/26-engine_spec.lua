-- The engine under every door (lua/backoff/engine.lua): a breaker is
-- asked before every attempt, first included, and told every outcome;
-- an attempt it refuses is never made and costs the budget nothing; a
-- retry paid for and then refused is given back.  A fake breaker and a
-- fake budget log what the engine asks of them; fake time throughout.
local backoff = require "backoff"
local http = require "backoff.http"

local function pack(...) return { n = select("#", ...), ... } end

-- a breaker that answers from a script and logs every call
local function fake_breaker(script)
  local br = { log = {}, allows_ = true, allow_ = true, next_ticket = 0 }
  local function log(...) br.log[#br.log + 1] = { ... } end
  function br:allows()
    log("allows")
    if script and script.allows then return script.allows(self) end
    return self.allows_
  end
  function br:allow()
    if script and script.allow and not script.allow(self) then
      log("allow", false)
      return false
    end
    self.next_ticket = self.next_ticket + 1
    log("allow", self.next_ticket)
    return true, self.next_ticket
  end
  function br.record(_, ok, ticket, seconds)
    log("record", ok, ticket, seconds)
  end
  function br.release(_, ticket) log("release", ticket) end
  return br
end

local function fake_budget(tokens)
  local b = { tokens = tokens, log = {} }
  function b:withdraw(c)
    self.log[#self.log + 1] = { "withdraw", c }
    if self.tokens < 1 then return false end
    self.tokens = self.tokens - 1
    return true
  end
  function b:deposit(n)
    self.log[#self.log + 1] = { "deposit", n }
    self.tokens = self.tokens + 1
  end
  function b:record(ok, attempt) self.log[#self.log + 1] = { "record", ok,
                                                              attempt } end
  return b
end

local function world()
  local w = { now = 0 }
  function w.clock() return w.now end
  function w.sleep(d) w.now = w.now + d end
  return w
end

describe("the engine's breaker", function()
  local w, p
  before_each(function()
    w = world()
    p = backoff.constant { delay = 1, max_attempts = 4, clock = w.clock }
  end)

  it("is asked before the first attempt: open, nothing is made or paid",
    function()
      local br = fake_breaker { allow = function() return false end }
      local bud = fake_budget(10)
      local calls, gave = 0, {}
      local r = pack(backoff.retry(p, function() calls = calls + 1 end,
        { breaker = br, budget = bud, sleep = w.sleep,
          on_giveup = function(...) gave = pack(...) end }))
      assert.same({ n = 3, nil, "circuit open: no attempt was made",
      "circuit_open" }, r)
      assert.equal(0, calls)
      assert.same({}, bud.log)
      assert.same({ n = 4, "circuit open: no attempt was made",
        "circuit_open", 0, nil }, gave)
    end)

  it("hands each attempt's ticket and duration back with its outcome",
    function()
      local br = fake_breaker()
      local r = backoff.retry(p, function(a)
        w.now = w.now + 0.25                  -- each attempt takes 0.25 s
        if a < 3 then return nil, "down" end
        return "up"
      end, { breaker = br, sleep = w.sleep })
      assert.equal("up", r)
      assert.same({
        { "allow", 1 }, { "record", false, 1, 0.25 }, { "allows" },
        { "allow", 2 }, { "record", false, 2, 0.25 }, { "allows" },
        { "allow", 3 }, { "record", true, 3, 0.25 },
      }, br.log)
    end)

  it("stops before paying when it would refuse the next attempt",
    function()
      local br = fake_breaker()
      local bud = fake_budget(10)
      local r = pack(backoff.retry(p, function()
        br.allows_ = false                    -- it opened meanwhile
        return nil, "down"
      end, { breaker = br, budget = bud, sleep = w.sleep }))
      assert.same({ n = 3, nil, "down", "circuit_open" }, r)
      assert.same({ { "record", false, 1 } }, bud.log)   -- no withdraw
      assert.equal(0, w.now)                  -- and no sleep
    end)

  it("gives the retry back when it refuses after the wait", function()
    local n = 0
    local br = fake_breaker { allow = function()
      n = n + 1
      return n == 1                           -- open by the second
    end }
    local bud = fake_budget(10)
    local r = pack(backoff.retry(p, function() return nil, "down" end,
      { breaker = br, budget = bud, sleep = w.sleep }))
    assert.same({ n = 3, nil, "down", "circuit_open" }, r)
    assert.same({ { "record", false, 1 }, { "withdraw" }, { "deposit" } },
                bud.log)
    assert.equal(10, bud.tokens)
  end)

  it("releases a ticket when retry_on says the failure is the caller's",
    function()
      local br = fake_breaker()
      local r = pack(backoff.retry(p, function() return nil, "bad input" end,
        { breaker = br, sleep = w.sleep,
          retry_on = function() return false end }))
      assert.equal("retry_on", r[3])
      assert.same({ { "allow", 1 }, { "release", 1 } }, br.log)
    end)

  it("refuses through http.request too, before any request", function()
    local br = fake_breaker { allow = function() return false end }
    local calls = 0
    local r = pack(http.request(p, function() calls = calls + 1 end,
      { method = "GET", breaker = br }))
    assert.same({ n = 3, nil, "circuit open: no attempt was made",
      "circuit_open" }, r)
    assert.equal(0, calls)
  end)

  it("is told a final 5xx of http.request as a failure", function()
    local br = fake_breaker()
    local bud = fake_budget(10)
    local res = http.request(p, function() return { status = 500 } end,
      { method = "GET", breaker = br, budget = bud })
    assert.equal(500, res.status)             -- returned as it came
    assert.same({ "record", false, 1, 0 }, br.log[2])
    assert.same({ { "record", false, 1 } }, bud.log)
  end)

  it("is refused by the option checks when it lacks a method", function()
    for _, bad in ipairs { 5, {}, { allow = print, allows = print,
                                    record = print } } do
      assert.error_matches(function()
        backoff.retry(p, function() return true end, { breaker = bad })
      end, "option 'breaker' must be a backoff.breaker", nil, true)
    end
  end)
end)

describe("the engine's budget payment", function()
  it("withdraws at timeout_cost after a timeout, at throttle_cost after "
     .. "a hint, the budget's own cost otherwise, for the next attempt",
    function()
      local log = {}
      local bud = { cost = 1 }
      function bud.withdraw(_, c, attempt)
        log[#log + 1] = { c, attempt }
        return true
      end
      function bud.record() end
      function bud.timeout_cost() return 6 end
      function bud.throttle_cost() return 9 end
      local errs = { "timeout", "connect() timed out", "refused", "busy" }
      local p = backoff.constant { delay = 0, max_attempts = 5 }
      backoff.retry(p, function(a) return a == 5, errs[a] end, {
        budget = bud, sleep = function() end,
        server_hint = function(e) return e == "busy" and 0 or nil end })
      assert.same({ { 6, 2 }, { 6, 3 }, { 1, 4 }, { 9, 5 } }, log)
    end)

  it("leaves the cost to retry_cost when it is given", function()
    local got = {}
    local bud = { withdraw = function(_, c) got[#got + 1] = c return true end,
                  record = function() end,
                  timeout_cost = function() return 6 end }
    backoff.retry(backoff.constant { delay = 0, max_attempts = 2 },
      function(a) return a == 2, "timeout" end, { budget = bud,
        sleep = function() end, retry_cost = function() return 2 end })
    assert.same({ 2 }, got)
  end)
end)

describe("the engine's happy path with options", function()
  it("builds no run state for a budget and metrics alone", function()
    local p = backoff.constant { delay = 0, max_attempts = 3 }
    local bud = fake_budget(5)
    local runs = {}
    local m = { run = function(_, ...) runs[#runs + 1] = pack(...) end }
    local ropts = { budget = bud, metrics = m }
    assert.equal("ok", (backoff.retry(p, function() return "ok" end, ropts)))
    assert.same({ { "record", true, 1 } }, bud.log)
    assert.same({ { n = 4, true, 1, nil, 0 } }, runs)
    -- what a retry needs is still there when the first attempt fails
    local r = backoff.retry(p, function(a) return a == 2 and "ok" or nil end,
                            { budget = bud, sleep = function() end })
    assert.equal("ok", r)
    assert.same({ "record", true, 2 }, bud.log[#bud.log])
  end)
end)
