-- backoff.http.request with fake upstreams, a fake clock and a sleep
-- that only advances it.
local backoff = require "backoff"
local http = require "backoff.http"
local metrics = require "backoff.metrics"

local function pack(...) return { n = select("#", ...), ... } end
local unpack = table.unpack or unpack  -- luacheck: ignore 143

local function world()
  local w = { now = 0, slept = {} }
  function w.clock() return w.now end
  function w.sleep(d)
    w.slept[#w.slept + 1] = d
    w.now = w.now + d
  end
  return w
end

-- an upstream answering the scripted results in turn (the last one
-- repeats); each entry is a table of do_request's results
local function upstream(script)
  local u = { calls = 0, timeouts = {} }
  u.fn = function(attempt, t)
    u.calls = u.calls + 1
    assert(attempt == u.calls)
    u.timeouts[attempt] = t
    local r = script[attempt] or script[#script]
    return unpack(r, 1, r.n or #r)
  end
  return u
end
local function res(status, headers, body)
  return { status = status, headers = headers or {}, body = body }
end

-- the tests' requests are GETs unless they say otherwise (request
-- itself never guesses a method)
local function request(p, fn, opts)
  opts = opts or {}
  if opts.method == nil and opts.idempotent == nil then opts.method = "GET" end
  return http.request(p, fn, opts)
end

describe("backoff.http.request", function()
  local w, p
  before_each(function()
    w = world()
    p = backoff.constant { delay = 0.1, max_attempts = 4, clock = w.clock }
  end)

  describe("statuses", function()
    it("retries the default statuses, returns the others as they came",
      function()
        for _, code in ipairs { 408, 429, 502, 503, 504 } do
          local u = upstream { { res(code) }, { res(200, nil, "ok") } }
          local r = pack(request(p, u.fn, { sleep = w.sleep }))
          assert.equal(200, r[1].status, code)
          assert.equal(2, u.calls)
        end
        for _, code in ipairs { 200, 204, 301, 400, 404, 409, 500, 501 } do
          local u = upstream { { res(code, nil, "body"), "extra" } }
          local r = pack(request(p, u.fn, { sleep = w.sleep }))
          assert.same({ n = 2, u.fn and r[1], "extra" }, r)
          assert.equal(code, r[1].status)
          assert.equal(1, u.calls, code)
        end
        assert.same({ statuses = { 408, 429, 502, 503, 504 },
                      max_hint = 60 }, http.defaults())
      end)

    it("takes its own statuses, as a list or a set", function()
      for _, s in ipairs { { 500 }, { [500] = true } } do
        local u = upstream { { res(500) }, { res(503) } }
        local r = pack(request(p, u.fn, { statuses = s,
                                               sleep = w.sleep }))
        assert.equal(503, r[1].status)
        assert.equal(2, u.calls)
      end
    end)

    it("gives up with the last response", function()
      local u = upstream { { res(503, nil, "busy") } }
      local r = pack(request(p, u.fn, { sleep = w.sleep }))
      assert.same({ nil, "HTTP 503", "max_attempts" }, { r[1], r[2], r[3] })
      assert.equal("busy", r[4].body)
      assert.equal(4, u.calls)
    end)

    it("works with ngx.location.capture's shape and a status number",
      function()
        local u = upstream { { { status = 503, header = {
          ["Retry-After"] = "2" } } }, { { status = 200, body = "x" } } }
        local r = request(p, u.fn, { sleep = w.sleep })
        assert.equal("x", r.body)
        assert.same({ 2 }, w.slept)
        w.slept = {}
        u = upstream { { 429, { ["retry-after"] = "1" } }, { 204, {}, "b" } }
        assert.same({ n = 3, 204, {}, "b" },
                    pack(request(p, u.fn, { sleep = w.sleep })))
        assert.same({ 1 }, w.slept)
      end)
  end)

  describe("hints", function()
    it("waits at least the server's hint, bounded by max_hint", function()
      local u = upstream {
        { res(503, { ["Retry-After"] = "3" }) },
        { res(429, { ["X-RateLimit-Reset"] = "2" }) },
        { res(200) } }
      request(p, u.fn, { sleep = w.sleep })
      assert.same({ 3, 2 }, w.slept)
    end)

    it("gives up with retry_after for a hint over max_hint, unslept",
      function()
        for _, c in ipairs { { nil, "61" }, { 5, "6" }, { 0, "1" } } do
          w.slept = {}
          local u = upstream { { res(503, { ["Retry-After"] = c[2] }) } }
          local r = pack(request(p, u.fn, { sleep = w.sleep,
                                                 max_hint = c[1] }))
          assert.same({ nil, "HTTP 503", "retry_after" },
                      { r[1], r[2], r[3] })
          assert.same({}, w.slept)
          assert.equal(1, u.calls)
        end
      end)

    it("keeps a policy's own smaller max_hint, and the policy itself",
      function()
        local q = backoff.constant { delay = 0, max_hint = 2,
                                     max_attempts = 3 }
        local u = upstream { { res(503, { ["Retry-After"] = "3" }) } }
        local r = pack(request(q, u.fn, { sleep = w.sleep,
                                               max_hint = 10 }))
        assert.equal("retry_after", r[3])
        assert.equal(2, q:config().max_hint)
        assert.equal(0, q:attempts())
        local d = backoff.constant { delay = 0, max_attempts = 2 }
        request(d, upstream { { res(200) } }.fn)
        assert.is_nil(d:config().max_hint)
      end)
  end)

  describe("idempotency", function()
    local refused = { nil, "connection refused" }
    local connect_timeout = { nil, "timeout", "connect", n = 3 }
    local read_timeout = { nil, "timeout", "read", n = 3 }
    local closed = { nil, "closed" }

    it("retries a GET after any failure", function()
      for _, f in ipairs { refused, connect_timeout, read_timeout, closed,
                           { res(503) } } do
        local u = upstream { f, { res(200) } }
        assert.equal(200, request(p, u.fn, { sleep = w.sleep }).status)
        assert.equal(2, u.calls)
      end
    end)

    it("retries a POST only when it certainly did not reach the server",
      function()
        for _, f in ipairs { refused, connect_timeout } do
          local u = upstream { f, { res(201) } }
          assert.equal(201, request(p, u.fn, { method = "POST",
            sleep = w.sleep }).status)
          assert.equal(2, u.calls)
        end
        for _, f in ipairs { read_timeout, closed, { nil, "timeout" },
                             { res(503) }, { res(429) } } do
          local u = upstream { f, { res(201) } }
          local r = pack(request(p, u.fn, { method = "POST",
            sleep = w.sleep }))
          assert.is_nil(r[1])
          assert.equal("not_idempotent", r[3])
          assert.equal(1, u.calls)
        end
      end)

    it("retries a POST with an Idempotency-Key, or when told", function()
      for _, o in ipairs {
        { method = "POST", headers = { ["Idempotency-Key"] = "abc" } },
        { method = "PATCH", idempotent = true },
        { method = 8, idempotent = true },   -- ngx.HTTP_POST
      } do
        o.sleep = w.sleep
        local u = upstream { { nil, "timeout" }, { res(503) }, { res(201) } }
        assert.equal(201, request(p, u.fn, o).status)
        assert.equal(3, u.calls)
      end
    end)

    it("does not retry a GET declared not idempotent after a read",
      function()
        local u = upstream { read_timeout, { res(200) } }
        local r = pack(request(p, u.fn, { idempotent = false,
                                               sleep = w.sleep }))
        assert.equal("not_idempotent", r[3])
        u = upstream { refused, { res(200) } }
        assert.equal(200, request(p, u.fn, { idempotent = false,
          sleep = w.sleep }).status)
      end)

    it("treats an error do_request raised as one that may have reached "
       .. "the server", function()
      local n = 0
      local function raising()
        n = n + 1
        if n == 1 then error("boom", 0) end
        return res(200)
      end
      assert.equal(200, request(p, raising, { sleep = w.sleep,
                                              retry_raised = true }).status)
      n = 0
      local r = pack(request(p, raising, { method = "POST",
        sleep = w.sleep, retry_raised = true }))
      assert.same({ nil, "not_idempotent" }, { r[1], r[3] })
      assert.equal("boom\nstack traceback:", r[2]:sub(1, 21))
    end)
  end)

  describe("per-try timeouts", function()
    it("hands the policy's timeouts, shrinking towards the deadline",
      function()
        local q = backoff.retry_timeouts { max_actual_duration = 10,
          jitter_factor = 0, timeout_jitter_factor = 0,
          min_adjust_timeout = 0.1, max_attempts = 5, clock = w.clock }
        local u = upstream { { nil, "timeout" } }
        local fn = function(a, t)
          w.now = w.now + t.timeout         -- each try takes its timeout
          return u.fn(a, t)
        end
        request(q, fn, { sleep = w.sleep,
                              timeouts = { connect = 0.1 } })
        local t = u.timeouts
        assert.is_true(#t >= 3)
        assert.same({ connect = 500, send = 5000, read = 5000,
                      timeout = 5 }, t[1])
        for i = 2, #t do
          assert.is_true(t[i].read < t[i - 1].read)
          assert.is_true(t[i].connect <= t[i].read)
        end
      end)

    it("hands the time left when the policy has a deadline but no "
       .. "per-try timeouts", function()
      local q = backoff.constant { delay = 1, max_actual_duration = 5,
                                   clock = w.clock }
      local u = upstream { { res(503) } }
      request(q, u.fn, { sleep = w.sleep })
      assert.same({ 5000, 4000, 3000, 2000 }, { u.timeouts[1].read,
        u.timeouts[2].read, u.timeouts[3].read, u.timeouts[4].read })
    end)

    it("hands nil without a timeout or a deadline", function()
      local u = upstream { { res(200) } }
      request(p, u.fn)
      assert.is_nil(u.timeouts[1])
    end)
  end)

  describe("hooks, budgets and metrics", function()
    it("gives the hooks the error and the response", function()
      local log = {}
      local u = upstream { { res(503) }, { nil, "closed" } }
      local r = pack(request(p, u.fn, { sleep = w.sleep,
        on_retry = function(err, d, a, rr)
          log[#log + 1] = { "retry", err, d, a, rr and rr.status } end,
        on_giveup = function(err, reason, a, rr)
          log[#log + 1] = { "giveup", err, reason, a, rr } end,
        retry_on = function(err, a, rr)
          log[#log + 1] = { "retry_on", err, a, rr and rr.status }
          if a == 3 then return false, "enough" end
          return true
        end }))
      assert.same({ nil, "closed", "enough" }, { r[1], r[2], r[3] })
      assert.same({
        { "retry_on", "HTTP 503", 1, 503 },
        { "retry", "HTTP 503", 0.1, 1, 503 },
        { "retry_on", "closed", 2 }, { "retry", "closed", 0.1, 2 },
        { "retry_on", "closed", 3 }, { "giveup", "closed", "enough", 3 },
      }, log)
    end)

    it("counts each request once in metrics, hints included", function()
      metrics.reset()
      local m = metrics.new("http spec", { shared = false })
      request(p, upstream { { res(503, { ["Retry-After"] = "1" }) },
        { res(200) } }.fn, { sleep = w.sleep, metrics = m })
      request(p, upstream { { nil, "timeout" } }.fn,
        { method = "POST", sleep = w.sleep, metrics = m })
      request(p, upstream { { res(404) } }.fn, { metrics = m })
      assert.same({ attempts = 4, retries = 1, successes = 2,
        successes_after_retry = 1, budget_refusals = 0, hints_honoured = 1,
        hedges = 0, hedges_won = 0, hedges_cancelled = 0,
        hedge_budget_refusals = 0, giveups = { not_idempotent = 1 } },
        m:counts())
    end)

    it("passes a budget on to the runner", function()
      local bud = backoff.budget { capacity = 5, cost = 5 }
      local u = upstream { { res(503) } }
      local r = pack(request(p, u.fn, { sleep = w.sleep,
                                             budget = bud }))
      assert.equal("budget", r[3])
      assert.equal(2, u.calls)
    end)

    it("takes a policy given as an options table", function()
      local u = upstream { { res(503) }, { res(200) } }
      assert.equal(200, request({ strategy = "constant", delay = 0.5,
                                  max_attempts = 3 },
        u.fn, { sleep = w.sleep }).status)
      assert.same({ 0.5 }, w.slept)
    end)
  end)

  describe("misuse", function()
    it("raises, without retrying, for a result that is not a response",
      function()
        for _, bad in ipairs { { "ok" }, { true }, { {} },
            { { status = "200" } }, { { status = 99 } }, { 1000 },
            { { status = 200.5 } },
            { setmetatable({}, { __index = function() error("x") end }) } } do
          local u = upstream { bad }
          assert.error_matches(function()
            request(p, u.fn, { sleep = w.sleep })
          end, "backoff.http.request: do_request ", nil, true)
          assert.equal(1, u.calls)
        end
      end)

    it("refuses bad arguments and options by name", function()
      local fn = function() return res(200) end
      local cases = {
        { { 5, fn }, "backoff.http.request: argument 'policy' must be a "
          .. "backoff object or an options table (got number); usage: " },
        { { {}, fn }, "policy table needs a 'strategy' field" },
        { { { strategy = "constant" }, fn }, "missing required option "
          .. "'delay'" },
        -- a policy table's own max_hint is checked as backoff.retry
        -- checks it, not replaced by opts.max_hint
        { { { strategy = "constant", delay = 0, max_hint = "5" }, fn },
          "backoff.constant: option 'max_hint' must be a finite number" },
        { { { strategy = "constant", delay = 0, max_hint = true }, fn },
          "backoff.constant: option 'max_hint' must be a finite number" },
        { { { strategy = "constant", delay = 0, max_hint = 1 / 0 }, fn },
          "backoff.constant: option 'max_hint' must be a finite number" },
        { { p, 5 }, "backoff.http.request: argument 'do_request' must be a "
          .. "function (got number)" },
        { { p, fn, 5 }, "backoff.http.request: options must be a table "
          .. "(got number)" },
        { { p, fn }, "option 'method' is required" },
        { { p, fn, { sleep = print } }, "option 'method' is required" },
        { { p, fn, { nope = 1 } }, "backoff.http.request: unknown option "
          .. "'nope'" },
        { { p, fn, { sleep = 1 } }, "backoff.http.request: option 'sleep' "
          .. "must be a function" },
        { { p, fn, { retry_after = print } }, "option 'retry_after' is not "
          .. "taken" },
        { { p, fn, { method = "G T" } }, "option 'method' must be a method" },
        { { p, fn, { method = 3 } }, "option 'method' must be an ngx.HTTP_" },
        { { p, fn, { headers = "x" } }, "option 'headers' must be a table" },
        { { p, fn, { idempotent = 1 } }, "option 'idempotent' must be a "
          .. "boolean" },
        { { p, fn, { statuses = 503 } }, "option 'statuses' must be a list" },
        { { p, fn, { statuses = { 99 } } }, "status codes from 100 to 599" },
        { { p, fn, { statuses = { 503.5 } } }, "status codes from 100" },
        { { p, fn, { statuses = { a = 1 } } }, "a list of status codes or "
          .. "a set" },
        { { p, fn, { max_hint = -1 } }, "option 'max_hint' must be a finite "
          .. "number >= 0" },
        { { p, fn, { max_hint = 0 / 0 } }, "option 'max_hint' must be" },
        { { p, fn, { timeouts = { read = 0 } } }, "option 'timeouts' takes "
          .. "connect, send and read" },
        { { p, fn, { metrics = {} } }, "option 'metrics' must be a "
          .. "backoff.metrics" },
      }
      for _, c in ipairs(cases) do
        local calls = 0
        local args = c[1]
        if args[2] == fn then
          args[2] = function() calls = calls + 1 return res(200) end
        end
        assert.error_matches(function()
          http.request(args[1], args[2], args[3])
        end, c[2], nil, true)
        assert.equal(0, calls)
      end
    end)
  end)
end)
