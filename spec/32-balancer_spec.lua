-- backoff.balancer outside nginx: ngx.ctx and ngx.balancer are fakes
-- that record what the helper asks of nginx.

local backoff = require "backoff.core"
local budget = require "backoff.budget"

describe("backoff.balancer", function()
  local balancer, calls, more_tries_result
  local saved_ngx = rawget(_G, "ngx")

  before_each(function()
    calls = { timeouts = {}, more = 0 }
    more_tries_result = { true }
    package.loaded["ngx.balancer"] = {
      set_timeouts = function(c, s, r)
        calls.timeouts[#calls.timeouts + 1] = { c, s, r }
        return true
      end,
      set_more_tries = function(n)
        assert(n == 1)
        calls.more = calls.more + 1
        return more_tries_result[1], more_tries_result[2]
      end,
    }
    package.loaded["backoff.balancer"] = nil
    balancer = require "backoff.balancer"
    rawset(_G, "ngx", { ctx = {} })
  end)

  after_each(function()
    package.loaded["ngx.balancer"] = nil
    rawset(_G, "ngx", saved_ngx)
  end)

  -- a policy with per-try timeouts and a clock the test moves
  local now = 0
  local function timed_policy(extra)
    local o = { max_actual_duration = 10, min_adjust_timeout = 0.1,
                jitter_factor = 0, timeout_jitter_factor = 0,
                clock = function() return now end, seed = 1 }
    for k, v in pairs(extra or {}) do o[k] = v end
    return backoff.retry_timeouts(o)
  end

  it("grants tries up to max_attempts, one request at a time", function()
    local p = backoff.constant { delay = 0.5, max_attempts = 3 }
    local ok, attempt, timeout, delay = balancer(p)
    assert.same({ true, 1, nil, 0 }, { ok, attempt, timeout, delay })
    assert.equal(1, calls.more)
    assert.equal(0, #calls.timeouts)      -- no timeouts: nginx's own
    ok, attempt, timeout, delay = balancer(p)
    assert.same({ true, 2, nil, 0.5 }, { ok, attempt, timeout, delay })
    assert.equal(2, calls.more)
    ok, attempt = balancer(p)
    assert.same({ true, 3 }, { ok, attempt })
    assert.equal(2, calls.more)           -- the third try is the last
    assert.equal(0, p:attempts())         -- the policy itself untouched
    -- a new request (new ngx.ctx) starts over
    rawget(_G, "ngx").ctx = {}
    assert.same({ true, 1, nil, 0 }, { balancer(p) })
    assert.equal(3, calls.more)
  end)

  it("gives up when called past what the policy allows", function()
    now = 0
    local p = timed_policy()
    assert.is_true((balancer(p)))
    now = 11                              -- the deadline passed
    local ok, reason = balancer(p)
    assert.is_nil(ok)
    assert.equal("max_actual_duration", reason)
    assert.same({ nil, "max_actual_duration" }, { balancer(p) })
  end)

  it("sets shrinking per-try timeouts and stops at the deadline",
     function()
    now = 0
    local p = timed_policy()
    local ok, _, t1 = balancer(p)
    assert.is_true(ok)
    assert.equal(5, t1)                   -- 10 * adjust_timeout_factor
    assert.same({ 5, 5, 5 }, calls.timeouts[1])
    now = 5
    local _, a2, t2 = balancer(p)
    assert.equal(2, a2)
    assert.is_true(t2 < t1 and t2 > 0)
    assert.same({ t2, t2, t2 }, calls.timeouts[2])
    assert.equal(2, calls.more)
    now = 9.5
    local ok3, a3, t3 = balancer(p)
    assert.same({ true, 3 }, { ok3, a3 })
    assert.is_true(t3 < t2 and 9.5 + t3 < 10)
    assert.equal(3, calls.more)
    now = 10                              -- no time left: gives up
    assert.same({ nil, "max_actual_duration" }, { balancer(p) })
    assert.equal(3, calls.more)
  end)

  it("scales timeouts by factors, false keeps nginx's own", function()
    now = 0
    balancer(timed_policy(), { timeouts = { connect = 0.1, read = false } })
    assert.same({ 0.5, 5 }, { calls.timeouts[1][1], calls.timeouts[1][2] })
    assert.is_nil(calls.timeouts[1][3])
  end)

  it("withdraws a retry's cost from the budget for each try granted",
     function()
    local p = backoff.constant { delay = 0, max_attempts = 10 }
    local bud = budget { capacity = 10, cost = 5 }
    for i = 1, 3 do
      local ok, attempt = balancer(p, { budget = bud })
      assert.same({ true, i }, { ok, attempt })
    end
    assert.equal(2, calls.more)           -- the budget paid for two
    assert.equal(0, bud:tokens())
  end)

  it("refunds the budget when nginx's tries cap refused the try",
     function()
    local bud = budget { capacity = 10, cost = 5 }
    more_tries_result = { true, "reduced tries due to limit" }
    balancer(backoff.constant { delay = 0 }, { budget = bud })
    assert.equal(10, bud:tokens())
  end)

  it("done() gives back an unused grant and deposits for a success",
     function()
    local p = backoff.constant { delay = 0, max_attempts = 10 }
    local bud = budget { capacity = 100, cost = 5, refund = 1 }
    local opts = { budget = bud }
    balancer(p, opts)                     -- try 1, grants try 2: 95
    assert.equal(95, bud:tokens())
    bud:withdraw(10)                      -- 85
    balancer.done(opts, true)             -- first-try success
    assert.equal(91, bud:tokens())        -- 85 + 5 unused + 1 refund
    balancer.done(opts, true)             -- once per request
    assert.equal(91, bud:tokens())

    rawget(_G, "ngx").ctx = {}
    balancer(p, opts)                     -- 86
    balancer(p, opts)                     -- try 2, grants try 3: 81
    rawget(_G, "ngx").status = 503
    balancer.done(opts)                   -- failed: only the unused grant
    assert.equal(86, bud:tokens())

    rawget(_G, "ngx").ctx = {}
    balancer(p, opts)                     -- 81
    balancer(p, opts)                     -- 76
    rawget(_G, "ngx").status = 200
    balancer.done(opts)                   -- success on a retry: + cost
    assert.equal(86, bud:tokens())
    assert.has_no.errors(function() balancer.done({}) end)
  end)

  it("keeps separate states under separate ctx keys", function()
    local p = backoff.constant { delay = 0, max_attempts = 2 }
    assert.same({ true, 1, nil, 0 }, { balancer(p, { ctx_key = "a" }) })
    assert.same({ true, 1, nil, 0 }, { balancer(p, { ctx_key = "b" }) })
    assert.same({ true, 2, nil, 0 }, { balancer(p, { ctx_key = "a" }) })
  end)

  it("refuses a bad policy and bad options", function()
    local p = backoff.constant { delay = 0 }
    assert.error_matches(function() balancer(nil) end,
      "bad argument #1 to 'balancer' (backoff object expected, got nil)",
      nil, true)
    -- another userdata of this module (a budget) is not a policy
    local fake = backoff.budget {}
    assert.error_matches(function() balancer(fake) end,
      "bad argument #1 to 'balancer' (backoff object expected, got "
      .. "userdata)", nil, true)
    local cases = {
      { 5, "options must be a table (got number)" },
      { { retries = 1 }, "unknown option 'retries'" },
      { { budget = 5 }, "option 'budget' must be a backoff budget" },
      { { ctx_key = 1 }, "option 'ctx_key' must be a string (got 1)" },
      { { timeouts = 1 }, "option 'timeouts' must be a table" },
      { { timeouts = { connect = 0 } }, "a factor > 0 or false (got 0)" },
      { { timeouts = { write = 1 } }, "takes connect, send and read" },
    }
    for _, c in ipairs(cases) do
      assert.error_matches(function() balancer(p, c[1]) end, c[2], nil, true)
      assert.error_matches(function() balancer(p, c[1]) end,
                           "backoff.balancer: ", nil, true)
    end
    assert.is_nil(rawget(_G, "ngx").ctx.backoff_balancer)  -- none started
  end)
end)
