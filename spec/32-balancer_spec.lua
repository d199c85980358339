-- backoff.balancer outside nginx: ngx (ctx, get_phase, status, exit,
-- log) and ngx.balancer are fakes that record what the helper asks of
-- nginx.

local backoff = require "backoff.core"
local budget = require "backoff.budget"
local metrics = require "backoff.metrics"

describe("backoff.balancer", function()
  local balancer, calls, more_tries_result, fake
  local saved_ngx = rawget(_G, "ngx")

  before_each(function()
    calls = { timeouts = {}, more = 0, exits = {}, logs = {} }
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
    fake = { ctx = {}, phase = "balancer", status = 200 }
    fake.get_phase = function() return fake.phase end
    fake.exit = function(code) calls.exits[#calls.exits + 1] = code end
    fake.WARN = 5
    fake.log = function(level, ...)
      calls.logs[#calls.logs + 1] = { level, table.concat { ... } }
    end
    rawset(_G, "ngx", fake)
    metrics.reset()
  end)

  after_each(function()
    package.loaded["ngx.balancer"] = nil
    rawset(_G, "ngx", saved_ngx)
  end)

  -- a new request: fresh ngx.ctx, balancer phase
  local function new_request()
    fake.ctx, fake.phase, fake.status = {}, "balancer", 200
  end

  -- the log phase of the request, with this status
  local function log_phase(status)
    fake.phase, fake.status = "log", status
  end

  -- a policy with per-try timeouts and a clock the test moves
  local now = 0
  local function timed_policy(extra)
    local o = { max_actual_duration = 10, min_adjust_timeout = 0.1,
                jitter_factor = 0, timeout_jitter_factor = 0,
                max_attempts = 20, clock = function() return now end,
                seed = 1 }
    for k, v in pairs(extra or {}) do o[k] = v end
    return backoff.retry_timeouts(o)
  end

  -- a budget that logs every call (allows, withdraw, record, deposit)
  local function logging_budget(tokens, cost, extra)
    local bud = { tokens_ = tokens, log = {} }
    local function log(...) bud.log[#bud.log + 1] = { ... } end
    function bud:allows(c)
      log("allows", c)
      return self.tokens_ >= (c or cost)
    end
    function bud:withdraw(c)
      log("withdraw", c)
      c = c or cost
      if self.tokens_ < c then return false end
      self.tokens_ = self.tokens_ - c
      return true
    end
    bud.record = function(_, ok, attempt, c) log("record", ok, attempt, c) end
    bud.deposit = function(_, n) log("deposit", n) end
    bud.cost = function() return cost end
    for k, v in pairs(extra or {}) do bud[k] = v end
    return bud
  end

  describe("outside the phases it serves", function()
    it("says in one line that it needs balancer_by_lua*", function()
      local p = backoff.constant { delay = 0, max_attempts = 2 }
      for _, ph in ipairs { "content", "log", "access" } do
        fake.phase = ph
        assert.error_matches(function() balancer(p) end,
          "backoff.balancer needs balancer_by_lua* (called in the " .. ph
          .. " phase)", nil, true)
      end
      rawset(_G, "ngx", nil)
      local ok, err = pcall(balancer, p)
      assert.is_false(ok)
      assert.matches("backoff.balancer needs balancer_by_lua* (called "
        .. "outside nginx)", err, 1, true)
      assert.is_nil(err:find("\n"))
      assert.equal(0, calls.more)
    end)

    it("says in one line that done needs log_by_lua*", function()
      for _, ph in ipairs { "balancer", "content", "header_filter" } do
        fake.phase = ph
        assert.error_matches(function() balancer.done() end,
          "backoff.balancer.done needs log_by_lua* (called in the " .. ph
          .. " phase)", nil, true)
      end
      rawset(_G, "ngx", nil)
      local ok, err = pcall(balancer.done, {})
      assert.is_false(ok)
      assert.matches("backoff.balancer.done needs log_by_lua* (called "
        .. "outside nginx)", err, 1, true)
    end)
  end)

  describe("policies", function()
    it("refuses a policy without max_attempts", function()
      assert.error_matches(function()
        balancer(backoff.constant { delay = 0 })
      end, "backoff.balancer: the policy needs max_attempts", nil, true)
      assert.error_matches(function()
        balancer(backoff.retry_timeouts { max_attempts = 0 })
      end, "the policy needs max_attempts", nil, true)
      assert.equal(0, calls.more)
      assert.is_nil(fake.ctx["backoff:balancer"])
    end)

    it("refuses a deadline without per-try timeouts", function()
      assert.error_matches(function()
        balancer(backoff.constant { delay = 0, max_attempts = 3,
                                    max_actual_duration = 1 })
      end, "a policy with max_actual_duration needs per-try timeouts",
        nil, true)
    end)

    it("accepts backoff.recommended(): its per-try timeouts bound "
       .. "each try within its deadline", function()
      local rec = require("backoff").recommended()
      local ok, attempt, timeout = balancer(rec)
      assert.is_true(ok)
      assert.equal(1, attempt)
      assert.equal(5, timeout)             -- half of 10 s, at least 1 s
      assert.equal(1, #calls.timeouts)
      assert.equal(1, calls.more)          -- a second try granted
    end)

    it("names the constructor passed uncalled", function()
      assert.error_matches(function()
        balancer(require("backoff").recommended)
      end, "got function: did you mean backoff.recommended()?", nil, true)
    end)

    it("refuses a bad policy by argument", function()
      assert.error_matches(function() balancer(nil) end,
        "backoff.balancer: argument 'policy' must be a backoff object "
        .. "(got nil)", nil, true)
      assert.error_matches(function() balancer(io.stdout) end,
        "backoff.balancer: argument 'policy' must be a backoff object "
        .. "(got userdata)", nil, true)
      assert.error_matches(function() balancer({}) end,
        "must be a backoff object (got table)", nil, true)
    end)
  end)

  describe("grants", function()
    it("grants one try at a time, up to max_attempts", function()
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
      new_request()
      assert.same({ true, 1, nil, 0 }, { balancer(p) })
      assert.equal(3, calls.more)
    end)

    it("never asks again once nginx reported its cap", function()
      local p = backoff.constant { delay = 0, max_attempts = 10 }
      more_tries_result = { true, "reduced tries due to limit" }
      assert.is_true((balancer(p)))
      assert.equal(1, calls.more)
      -- nginx starts no other try; a try it started anyway is decided
      -- on the spot (the policy allows it), without asking again
      more_tries_result = { true }
      local ok, attempt = balancer(p)
      assert.same({ true, 2 }, { ok, attempt })
      assert.equal(1, calls.more)
    end)

    it("refuses a try nginx started without a grant (several servers)",
      function()
        local p = backoff.constant { delay = 0, max_attempts = 1 }
        assert.same({ true, 1, nil, 0 }, { balancer(p) })
        assert.equal(0, calls.more)           -- one try only: no grant
        assert.same({}, calls.exits)
        assert.same({ nil, "max_attempts" }, { balancer(p) })
        -- ended with NGX_BUSY (-3): nginx answers 502, where an HTTP
        -- status given to ngx.exit would answer 500
        assert.same({ -3 }, calls.exits)
        assert.same({ nil, "max_attempts" }, { balancer(p) })
        assert.same({ -3, -3 }, calls.exits)
        assert.equal(0, calls.more)
      end)

    it("says once per worker when the caller's ngx.exit turned a refusal "
       .. "into 500", function()
      local p = backoff.constant { delay = 0, max_attempts = 1 }
      for _, status in ipairs { 502, 500, 500 } do
        new_request()
        balancer(p)
        balancer(p)                           -- refused
        log_phase(status)
        balancer.done()
      end
      assert.equal(1, #calls.logs)
      assert.equal(fake.WARN, calls.logs[1][1])
      assert.matches("backoff.balancer: a refused try answered 500, not "
        .. "502: when balancer() returns nil, return without ngx.exit",
        calls.logs[1][2], 1, true)
      new_request()                           -- a 500 nothing refused
      balancer(p)
      log_phase(500)
      package.loaded["backoff.balancer"] = nil
      require("backoff.balancer").done()
      assert.equal(1, #calls.logs)
    end)

    -- the refused try never reached a peer: the budget was told of the
    -- last try's failure when the refused one came, and done() must not
    -- tell it again, nor count the refused try as an attempt
    it("records and counts a refused try's request once", function()
      local p = backoff.constant { delay = 0, max_attempts = 1 }
      local bud = logging_budget(100, 5)
      local m = metrics.new("refused", { shared = false })
      local opts = { budget = bud, metrics = m }
      balancer(p, opts)
      assert.same({ nil, "max_attempts" }, { balancer(p, opts) })
      log_phase(502)
      balancer.done(opts)
      local records = {}
      for _, e in ipairs(bud.log) do
        if e[1] == "record" then records[#records + 1] = e end
      end
      assert.same({ { "record", false, 1 } }, records)
      local c = m:counts()
      assert.same({ 1, 0, { max_attempts = 1 } },
                  { c.attempts, c.retries, c.giveups })
      -- a grpc budget loses one token for the one failure, not two
      new_request()
      local g = budget.grpc { max_tokens = 10, shared = false }
      opts = { budget = g }
      balancer(p, opts)
      balancer(p, opts)
      log_phase(502)
      balancer.done(opts)
      assert.equal(9, g:tokens())
    end)

    it("raises when set_more_tries fails", function()
      more_tries_result = { nil, "no upstream found" }
      assert.error_matches(function()
        balancer(backoff.constant { delay = 0, max_attempts = 2 })
      end, "backoff.balancer: set_more_tries: no upstream found", nil, true)
    end)
  end)

  describe("the deadline", function()
    it("cuts every try's timeouts to the time left and grants only a "
       .. "try that fits", function()
      now = 0
      local p = timed_policy()
      local ok, _, t1 = balancer(p)
      assert.is_true(ok)
      assert.equal(5, t1)                   -- 10 * adjust_timeout_factor
      assert.same({ 5, 5, 5 }, calls.timeouts[1])
      assert.equal(1, calls.more)
      now = 5                               -- try 1 ran into its timeout
      local _, a2, t2 = balancer(p)
      assert.equal(2, a2)
      assert.is_true(t2 < t1 and t2 > 0 and now + t2 <= 10)
      assert.same({ t2, t2, t2 }, calls.timeouts[2])
      assert.equal(2, calls.more)
      local last = 2
      while calls.more == last do           -- each try takes its timeout
        now = now + calls.timeouts[#calls.timeouts][1]
        local okk, _, t = balancer(p)
        assert.is_true(okk)                 -- a granted try: never refused
        assert.is_true(now + t <= 10, "ends by the deadline")
        last = last + 1
      end
      -- the last try got no grant: after its timeout, less than
      -- min_attempt_time (0.1 s) would be left
      local t = calls.timeouts[#calls.timeouts][1]
      assert.is_true(10 - (now + t) < 0.1)
      assert.is_true(#calls.timeouts < 20)
    end)

    it("runs a granted try that nginx started late, with 1 ms", function()
      now = 0
      local p = timed_policy()
      balancer(p)
      now = 11                              -- past the deadline
      local ok, attempt, timeout = balancer(p)
      assert.same({ true, 2, 0.001 }, { ok, attempt, timeout })
      assert.equal(1, calls.more)           -- and grants nothing more
    end)

    it("takes min_attempt_time from opts", function()
      now = 0
      balancer(timed_policy(), { min_attempt_time = 5 })
      assert.equal(1, calls.more)           -- 10 - 5 >= 5
      new_request()
      balancer(timed_policy(), { min_attempt_time = 5.5 })
      assert.equal(1, calls.more)           -- 10 - 5 < 5.5: no grant
    end)

    it("scales timeouts by factors, false keeps nginx's own", function()
      now = 0
      balancer(timed_policy(), { timeouts = { connect = 0.1, read = false } })
      assert.same({ 0.5, 5 }, { calls.timeouts[1][1], calls.timeouts[1][2] })
      assert.is_nil(calls.timeouts[1][3])
    end)

    -- nginx takes a try's timeouts as a C long of milliseconds: a huge
    -- deadline or factor must not hand it inf or 10^308 ms
    it("hands nginx at most 2^31 - 1 ms, never inf", function()
      now = 0
      balancer(timed_policy { max_actual_duration = 1e308 },
               { timeouts = { connect = 1e10 } })
      for _, v in ipairs(calls.timeouts[1]) do
        assert.equal((2 ^ 31 - 1) / 1000, v)
      end
    end)
  end)

  describe("budgets", function()
    it("grants with allows and pays with withdraw when the retry starts",
      function()
        local p = backoff.constant { delay = 0, max_attempts = 3 }
        local bud = logging_budget(100, 5)
        local opts = { budget = bud }
        balancer(p, opts)
        assert.same({ { "allows", 5 } }, bud.log)
        assert.equal(100, bud.tokens_)      -- a grant holds nothing
        balancer(p, opts)
        assert.same({ { "allows", 5 }, { "record", false, 1, nil },
          { "withdraw", 5 }, { "allows", 5 } }, bud.log)
        balancer(p, opts)                   -- the last try: no grant
        assert.same({ "record", false, 2, 5 }, bud.log[5])
        assert.same({ "withdraw", 5 }, bud.log[6])
        assert.equal(6, #bud.log)
        assert.equal(90, bud.tokens_)
        log_phase(200)
        balancer.done(opts)
        assert.same({ "record", true, 3, 5 }, bud.log[7])
        balancer.done(opts)                 -- once per request
        assert.equal(7, #bud.log)
      end)

    it("grants no try the budget does not allow", function()
      local p = backoff.constant { delay = 0, max_attempts = 5 }
      local bud = logging_budget(4, 5)
      balancer(p, { budget = bud })
      assert.equal(0, calls.more)
      assert.same({ { "allows", 5 } }, bud.log)
    end)

    -- the bound: a try after the first is made only when it is paid as
    -- it starts; a grant another request's retries emptied the budget
    -- for is refused, and nginx answers 502
    it("refuses a granted try the budget can no longer pay for", function()
      local p = backoff.constant { delay = 0, max_attempts = 3 }
      local bud = logging_budget(5, 5)
      local opts = { budget = bud }
      balancer(p, opts)
      assert.equal(1, calls.more)
      bud.tokens_ = 0                       -- other retries spent it
      assert.same({ nil, "budget" }, { balancer(p, opts) })
      assert.same({ -3 }, calls.exits)
      assert.equal(1, calls.more)           -- and no further grant
      log_phase(502)
      balancer.done(opts)
      assert.same({ { "allows", 5 }, { "record", false, 1, nil },
                    { "withdraw", 5 } }, bud.log)   -- recorded once
    end)

    it("pays a try nginx started without a grant when it starts, or "
       .. "refuses it", function()
      local p = backoff.constant { delay = 0, max_attempts = 5 }
      local bud = logging_budget(4, 5)
      local opts = { budget = bud }
      balancer(p, opts)
      assert.equal(0, calls.more)           -- 4 tokens: no grant
      bud.tokens_ = 5                       -- another request gave back
      local ok, attempt = balancer(p, opts) -- nginx's own try
      assert.same({ true, 2 }, { ok, attempt })
      assert.equal(0, bud.tokens_)          -- paid as it started
      assert.same({}, calls.exits)
      assert.same({ nil, "budget" }, { balancer(p, opts) })
      assert.same({ -3 }, calls.exits)
    end)

    it("never lets more retries through than the budget had, however "
       .. "many requests are in flight", function()
      local bud = budget { capacity = 20, cost = 5, refund = 0, shared = false }
      local p = backoff.constant { delay = 0, max_attempts = 4 }
      local ctxs, made, refused = {}, 0, 0
      for i = 1, 10 do                      -- ten first tries at once,
        fake.ctx = {}                       -- each granted a retry
        balancer(p, { budget = bud })
        ctxs[i] = fake.ctx
      end
      assert.equal(10, calls.more)
      for i = 1, 10 do                      -- every first try fails
        fake.ctx = ctxs[i]
        if balancer(p, { budget = bud }) then made = made + 1
        else refused = refused + 1 end
      end
      assert.same({ 4, 6 }, { made, refused })   -- 20 tokens: 4 retries
      assert.equal(6, #calls.exits)
      assert.equal(0, bud:tokens())
    end)

    it("pays each retry of a token bucket as it starts", function()
      local p = backoff.constant { delay = 0, max_attempts = 5 }
      local bud = budget { capacity = 10, cost = 5, shared = false }
      balancer(p, { budget = bud })
      assert.equal(1, calls.more)
      assert.equal(10, bud:tokens())        -- nothing held by the grant
      balancer(p, { budget = bud })
      assert.equal(5, bud:tokens())
      balancer(p, { budget = bud })
      assert.equal(0, bud:tokens())
      assert.equal(2, calls.more)           -- 0 tokens: no third grant
    end)

    it("deposits the legacy way without record: refund, or the cost of "
       .. "the retry that succeeded; nothing on failure", function()
      local p = backoff.constant { delay = 0, max_attempts = 10 }
      local bud = budget { capacity = 100, cost = 5, refund = 1,
                        shared = false }
      bud:withdraw(50)                      -- 50
      local opts = { budget = bud }
      balancer(p, opts)
      log_phase(200)
      balancer.done(opts)                   -- first-try success: refund
      assert.equal(51, bud:tokens())

      new_request()
      balancer(p, opts)
      balancer(p, opts)                     -- pays 5: 46
      log_phase(503)
      balancer.done(opts)
      assert.equal(46, bud:tokens())

      new_request()
      balancer(p, opts)
      balancer(p, opts)                     -- 41
      log_phase(404)                        -- the upstream answered
      balancer.done(opts)
      assert.equal(46, bud:tokens())        -- + the cost of the retry
    end)

    it("records and deposits nothing for a client abort", function()
      local p = backoff.constant { delay = 0, max_attempts = 10 }
      for _, status in ipairs { 499, 408 } do
        local bud = logging_budget(100, 5)
        new_request()
        balancer(p, { budget = bud })
        balancer(p, { budget = bud })
        local n = #bud.log
        log_phase(status)
        balancer.done({ budget = bud })
        assert.equal(n, #bud.log)
        local tb = budget { capacity = 100, cost = 5, shared = false }
        tb:withdraw(50)
        new_request()
        balancer(p, { budget = tb })
        log_phase(status)
        balancer.done({ budget = tb })
        assert.equal(50, tb:tokens())
      end
    end)

    it("takes an explicit outcome in done", function()
      local p = backoff.constant { delay = 0, max_attempts = 10 }
      local bud = logging_budget(100, 5)
      balancer(p, { budget = bud })
      log_phase(502)
      balancer.done({ budget = bud }, true)
      assert.same({ "record", true, 1, nil }, bud.log[#bud.log])
    end)
  end)

  describe("metrics", function()
    it("counts each request once, with the reason it stopped", function()
      local m = metrics.new("bal", { shared = false })
      local opts = { metrics = m }
      local p = backoff.constant { delay = 0, max_attempts = 3 }
      -- 3 tries, the last fails: max_attempts
      balancer(p, opts) balancer(p, opts) balancer(p, opts)
      log_phase(503)
      balancer.done(opts)
      balancer.done(opts)                   -- not counted twice
      -- a first-try success
      new_request()
      balancer(p, opts)
      log_phase(200)
      balancer.done(opts)
      -- a success on try 2
      new_request()
      balancer(p, opts) balancer(p, opts)
      log_phase(200)
      balancer.done(opts)
      -- a failure nginx did not retry although a try was granted
      new_request()
      balancer(p, opts)
      log_phase(500)
      balancer.done(opts)
      -- nginx's cap
      new_request()
      more_tries_result = { true, "reduced tries due to limit" }
      balancer(p, opts)
      log_phase(502)
      balancer.done(opts)
      -- a client abort on try 2: attempts, and nothing else
      new_request()
      more_tries_result = { true }
      balancer(p, opts) balancer(p, opts)
      log_phase(499)
      balancer.done(opts)
      assert.same({ attempts = 10, retries = 4, successes = 2,
        successes_after_retry = 1, budget_refusals = 0, hints_honoured = 0,
        hedges = 0, hedges_won = 0, hedges_cancelled = 0,
        hedge_budget_refusals = 0,
        giveups = { max_attempts = 1, next_upstream = 1,
                    next_upstream_tries = 1 } }, m:counts())
    end)

    it("counts a budget that stopped the retries", function()
      local m = metrics.new("bal2", { shared = false })
      local opts = { metrics = m, budget = logging_budget(0, 5) }
      balancer(backoff.constant { delay = 0, max_attempts = 3 }, opts)
      log_phase(503)
      balancer.done(opts)
      local c = m:counts()
      assert.same({ 1, 1, { budget = 1 } },
                  { c.attempts, c.budget_refusals, c.giveups })
    end)
  end)

  it("keeps separate states under separate ctx keys", function()
    local p = backoff.constant { delay = 0, max_attempts = 2 }
    assert.same({ true, 1, nil, 0 }, { balancer(p, { key = "a" }) })
    assert.same({ true, 1, nil, 0 }, { balancer(p, { key = "b" }) })
    assert.same({ true, 2, nil, 0 }, { balancer(p, { key = "a" }) })
  end)

  it("refuses bad options by name, before anything is started", function()
    local p = backoff.constant { delay = 0, max_attempts = 2 }
    local cases = {
      { 5, "options must be a table (got number)" },
      { { retries = 1 }, "unknown option 'retries'" },
      { { budget = 5 }, "option 'budget' must be a budget" },
      { { budget = { deposit = print } },
        "option 'budget' must be a budget" },
      -- balancer.done calls record or deposit: a budget with neither
      -- failed there with a raw "attempt to call a nil value"
      { { budget = { withdraw = print } },
        "without a record or deposit method" },
      { { budget = { withdraw = print, record = print, allows = 1 } },
        "table whose allows is a number, not a method" },
      { { key = 1 }, "option 'key' must be a non-empty string" },
      { { key = "" }, "option 'key' must be a non-empty string" },
      { { timeouts = 1 }, "option 'timeouts' must be a table" },
      { { timeouts = { connect = 0 } },
        "a factor > 0 or false (got 'connect' = 0)" },
      { { timeouts = { write = 1 } }, "takes connect, send and read" },
      { { metrics = {} }, "option 'metrics' must be a backoff.metrics" },
      { { metrics = io.stdout },
        "option 'metrics' must be a backoff.metrics" },
      { { min_attempt_time = -1 },
        "option 'min_attempt_time' must be a finite number >= 0" },
      { { min_attempt_time = 0 / 0 },
        "option 'min_attempt_time' must be a finite number >= 0" },
    }
    for _, c in ipairs(cases) do
      assert.error_matches(function() balancer(p, c[1]) end, c[2], nil, true)
      assert.error_matches(function() balancer(p, c[1]) end,
                           "backoff.balancer: ", nil, true)
      log_phase(200)
      assert.error_matches(function() balancer.done(c[1]) end, c[2], nil,
                           true)
      -- at the caller's line (the budget's message pointed past it)
      local line = debug.getinfo(1, "l").currentline + 1
      local ok, err = pcall(function() balancer.done(c[1]) end)
      assert.is_false(ok)
      assert.matches(":" .. line .. ": backoff.balancer: ", err, 1, true)
      fake.phase = "balancer"
    end
    assert.is_nil(fake.ctx["backoff:balancer"])  -- none started
    assert.equal(0, calls.more)
    log_phase(200)
    assert.error_matches(function() balancer.done(nil, "yes") end,
      "bad argument #2 to 'done' (boolean or nil expected for 'ok', got "
      .. "'yes')", nil, true)
  end)
end)
