-- A run the breaker refuses is held (lua/backoff/engine/hold.lua): it
-- waits its policy's delays and asks again for up to br:hold() seconds,
-- in the doors that wait; the recommended breaker holds 4 s.
local backoff = require "backoff"
local breaker = backoff.breaker
local http = require "backoff.http"

-- a virtual clock shared by the breaker, the policy and the sleep
local function world()
  local w = { t = 1000, slept = {} }
  w.clock = function() return w.t end
  w.sleep = function(d)
    w.slept[#w.slept + 1] = d
    w.t = w.t + d
  end
  return w
end

-- a breaker open now, for 1 s, holding `hold` seconds
local function open_breaker(w, hold)
  local br = breaker.new { failures = 1, clock = w.clock, hold = hold,
    policy = backoff.constant { delay = 1 } }
  br:record(false)
  assert(br:state() == "open")
  return br
end

local function policy(w, n)
  return backoff.constant { delay = 0.3, max_attempts = n or 10,
                            clock = w.clock }
end

describe("a run the breaker refuses", function()
  it("ends at once with hold = 0 (breaker.new's default)", function()
    local w = world()
    local br = open_breaker(w, nil)
    assert.equal(0, br:hold())
    local calls = 0
    local r = { backoff.retry(policy(w), function() calls = calls + 1
      return true end, { breaker = br, sleep = w.sleep }) }
    assert.same({ nil, "circuit open: no attempt was made",
                  "circuit_open" }, { r[1], r[2], r[3] })
    assert.equal(0, calls)
    assert.same({}, w.slept)
  end)

  it("is held: waits the policy's delays, asks again, and is made once "
     .. "the breaker lets it through", function()
    local w = world()
    local br = open_breaker(w, 2)
    local calls = 0
    local r = { backoff.retry(policy(w), function() calls = calls + 1
      return "ok" end, { breaker = br, sleep = w.sleep }) }
    assert.equal("ok", r[1])
    assert.equal(1, calls)                  -- the probe, after 1 s open
    assert.same({ 0.3, 0.3, 0.3, 0.3 }, w.slept)
    assert.equal("closed", (br:state()))
  end)

  it("ends after at most hold seconds from its start, having sent "
     .. "nothing", function()
    local w = world()
    local br = breaker.new { failures = 1, clock = w.clock, hold = 1,
      policy = backoff.constant { delay = 30 } }
    br:record(false)
    local calls, t0 = 0, w.t
    local r = { backoff.retry(policy(w), function() calls = calls + 1
      return true end, { breaker = br, sleep = w.sleep }) }
    assert.same({ nil, "circuit open: no attempt was made",
                  "circuit_open" }, { r[1], r[2], r[3] })
    assert.equal(0, calls)
    assert.is_true(w.t - t0 <= 1, w.t - t0)
    assert.same({ 0.3, 0.3, 0.3 }, w.slept)
  end)

  it("within the policy's limits: each ask is one of its attempts",
     function()
    local w = world()
    local br = open_breaker(w, 10)
    local calls = 0
    local r = { backoff.retry(policy(w, 3), function() calls = calls + 1
      return true end, { breaker = br, sleep = w.sleep }) }
    assert.same({ nil, "circuit open: no attempt was made",
                  "circuit_open" }, { r[1], r[2], r[3] })
    assert.equal(0, calls)
    assert.equal(2, #w.slept)               -- 3 attempts: 2 waits
  end)

  it("a retry refused is held too, its payment kept, then made",
     function()
    local w = world()
    local br = breaker.new { failures = 1, clock = w.clock, hold = 5,
      policy = backoff.constant { delay = 1 } }
    local paid, back = 0, 0                 -- a budget that counts
    local bud = { withdraw = function() paid = paid + 1 return true end,
      record = function() end, deposit = function() back = back + 1 end }
    local n = 0
    local r = { backoff.retry(policy(w), function()
      n = n + 1
      if n == 1 then return nil, "503" end  -- opens the breaker
      return "ok"
    end, { breaker = br, budget = bud, sleep = w.sleep }) }
    assert.equal("ok", r[1])
    assert.equal(2, n)
    assert.equal(1, paid)                   -- one retry paid, once
    assert.equal(0, back)
    assert.same({ 0.3, 0.3, 0.3, 0.3 }, w.slept)
  end)

  it("in http.request too; the balancer and the hedge never wait",
     function()
    local w = world()
    local br = open_breaker(w, 2)
    local calls = 0
    local res = http.request(policy(w), function()
      calls = calls + 1
      return { status = 200, headers = {}, body = "" }
    end, { method = "GET", breaker = br, sleep = w.sleep })
    assert.equal(200, res.status)
    assert.equal(1, calls)
  end)

  it("the recommended breaker holds 4 s; hold is checked", function()
    assert.equal(4, breaker.recommended():hold())
    assert.equal(0, breaker.recommended { hold = 0 }:hold())
    assert.equal(0, breaker.new {}:hold())
    for _, v in ipairs { -1, 61, 0 / 0, "2", 2000 } do
      assert.error_matches(function() breaker.new { hold = v } end,
        "backoff.breaker: option 'hold' must be a number of seconds >= 0 "
        .. "and <= 60", nil, true)
    end
  end)
end)
