-- backoff.metrics: counters per name, per process or in a (fake) shared
-- dict, and their Prometheus text exposition.  The exposition is also
-- read back by a real parser (python3-prometheus-client) in the nginx
-- suite spec/nginx/http.lua.
local metrics = require "backoff.metrics"

local unpack = table.unpack or unpack  -- luacheck: ignore 143

-- a stand-in for an ngx.shared dict: incr with an init value, get,
-- get_keys, delete; `full` makes incr fail as a full dict does, `evicts`
-- makes it succeed by evicting (newval, nil, true), as lua-nginx-module
-- answers when it removed other keys to make room; a value that is not
-- a number is nil, "not a number", as the real incr answers
local function fake_dict()
  local d = { data = {}, incrs = 0 }
  function d:incr(k, n, init)
    self.incrs = self.incrs + 1
    if self.full then return nil, "no memory" end
    local v = self.data[k]
    if v == nil then v = init end
    if v == nil then return nil, "not found" end
    if type(v) ~= "number" then return nil, "not a number" end
    self.data[k] = v + n
    if self.evicts then return v + n, nil, true end
    return v + n
  end
  function d:get(k) return self.data[k] end
  function d:get_keys()
    local t = {}
    for k in pairs(self.data) do t[#t + 1] = k end
    return t
  end
  function d:delete(k) self.data[k] = nil end
  return d
end

local ZERO = { attempts = 0, retries = 0, successes = 0,
  successes_after_retry = 0, budget_refusals = 0, hints_honoured = 0,
  hedges = 0, hedges_won = 0, hedges_cancelled = 0,
  hedge_budget_refusals = 0, giveups = {} }

describe("backoff.metrics", function()
  before_each(function() metrics.reset() end)

  describe("counts", function()
    it("counts runs: attempts, retries, outcomes, reasons, hints",
      function()
        local m = metrics.new("api", { shared = false })
        assert.same(ZERO, m:counts())
        m:run(true, 1)
        m:run(true, 3, nil, 2)
        m:run(false, 4, "max_attempts", 1)
        m:run(false, 2, "budget")
        m:run(false, 0, "max_actual_duration")
        assert.same({ attempts = 10, retries = 6, successes = 2,
          successes_after_retry = 1, budget_refusals = 1,
          hints_honoured = 3, hedges = 0, hedges_won = 0,
          hedges_cancelled = 0, hedge_budget_refusals = 0,
          giveups = { max_attempts = 1, budget = 1,
          max_actual_duration = 1 } }, m:counts())
      end)

    it("adds to one counter with add", function()
      local m = metrics.new("api", { shared = false })
      m:add("attempts", 3)
      m:add("giveups", 1, "not_idempotent")
      m:add("retries", 0)
      local c = m:counts()
      assert.same({ 3, 0, { not_idempotent = 1 } },
                  { c.attempts, c.retries, c.giveups })
    end)

    it("keeps names apart, and recorders of one name together", function()
      local a = metrics.new("a", { shared = false })
      local a2 = metrics.new("a", { shared = false })
      local b = metrics.new("ab", { shared = false })
      a:run(true, 2)
      a2:run(true, 1)
      b:run(false, 1, "retry_on")
      assert.equal(3, a:counts().attempts)
      assert.equal(1, b:counts().attempts)
      assert.same({}, a:counts().giveups)
    end)

    it("keeps counts in a shared dict, one incr per counter", function()
      local d = fake_dict()
      d.data.other = 5                      -- another user of the dict
      local m = metrics.new("api", { shared = d })
      m:run(true, 3, nil, 1)
      -- attempts, retries, successes, successes_after_retry, hints
      assert.equal(5, d.incrs)
      assert.equal(3, d.data["backoff\tattempts\tapi"])
      local seen = metrics.new("api", { shared = d })
      assert.equal(1, seen:counts().successes)
      assert.equal(0, metrics.new("api", { shared = false }):counts()
                                                             .attempts)
      metrics.reset(d)
      assert.same({ other = 5 }, d.data)
    end)

    it("loses counts, without raising, when the dict is full; warns once",
      function()
        local saved = rawget(_G, "ngx")
        local logged = {}
        rawset(_G, "ngx", { WARN = 5, get_phase = function()
          return "log" end,
          log = function(_, ...) logged[#logged + 1] = table.concat({ ... })
          end })
        local d = fake_dict()
        d.full = true
        local m = metrics.new("api", { shared = d })
        local ok = pcall(function()
          m:run(false, 2, "max_attempts")
          m:run(true, 1)
        end)
        rawset(_G, "ngx", saved)
        assert.is_true(ok)
        assert.equal(1, #logged)
        assert.matches("counts lost for 'api': no memory (make the "
          .. "lua_shared_dict larger", logged[1], 1, true)
      end)

    it("deletes a foreign value under its key once, says so, and counts "
       .. "afresh", function()
      local saved = rawget(_G, "ngx")
      local logged = {}
      rawset(_G, "ngx", { WARN = 5, get_phase = function() return "log" end,
        log = function(_, ...) logged[#logged + 1] = table.concat({ ... })
        end })
      local d = fake_dict()
      d.data["backoff\tattempts\tapi"] = "not mine"   -- another writer's
      local m = metrics.new("api", { shared = d })
      local ok = pcall(function()
        m:run(true, 1)
        m:run(true, 1)
      end)
      rawset(_G, "ngx", saved)
      assert.is_true(ok)
      assert.equal(1, #logged)                 -- once: it is gone
      assert.matches("backoff.metrics: corrupt value under key "
        .. "'backoff\\tattempts\\tapi' ('not mine'; not one it writes",
        logged[1], 1, true)
      assert.is_nil(logged[1]:find("larger", 1, true))
      assert.equal(2, m:counts().successes)   -- the other keys counted
      assert.equal(2, m:counts().attempts)    -- and this one, afresh
    end)

    it("warns of a forced eviction once per dict and minute, naming the "
       .. "dict", function()
      local saved = rawget(_G, "ngx")
      local logged, now = {}, 1000
      local d = fake_dict()
      d.evicts = true
      rawset(_G, "ngx", { WARN = 5, get_phase = function() return "log" end,
        now = function() return now end, shared = { backoff_metrics = d },
        log = function(level, ...)
          logged[#logged + 1] = level .. " " .. table.concat({ ... })
        end })
      local m = metrics.new("api", { shared = d })
      local ok = pcall(function()
        m:add("attempts", 1)
        m:add("attempts", 1)                  -- the same key: quiet
        m:add("retries", 1)                   -- another key: quiet too
        now = now + 59
        m:add("attempts", 1)                  -- within the minute
        now = now + 1
        m:add("attempts", 1)                  -- a minute on: again
      end)
      rawset(_G, "ngx", saved)
      assert.is_true(ok)
      assert.equal(2, #logged)
      assert.equal(4, m:counts().attempts)    -- nothing lost here
      assert.matches("^5 backoff: the lua_shared_dict 'backoff_metrics' is "
        .. "full: adding to key 'backoff\\tattempts\\tapi' evicted other "
        .. "keys", logged[1])
      assert.matches("give each user (each budget, backoff.metrics, other "
        .. "code) a lua_shared_dict of its own, larger", logged[1], 1, true)
      assert.matches("key 'backoff\\tattempts\\tapi'", logged[2], 1, true)
    end)
  end)

  describe("store.incr (what metrics and the budgets add with)", function()
    local store = require "backoff.store"

    it("passes init and ttl only when given, and returns what incr "
       .. "returns", function()
      local calls = {}
      local d = { incr = function(_, ...)
        calls[#calls + 1] = select("#", ...)
        return 7, "why", false
      end }
      assert.same({ 7, "why", false }, { store.incr(d, "k", 1) })
      store.incr(d, "k", 1, 0)
      store.incr(d, "k", 1, 0, 30)
      assert.same({ 2, 3, 4 }, calls)
      local e = fake_dict()
      e.evicts = true
      assert.same({ 3, nil, true }, { store.incr(e, "k", 3, 0) })
    end)

    it("logs nothing outside nginx, and names no dict it cannot find",
      function()
        local d = fake_dict()
        d.evicts = true
        assert.equal(1, (store.incr(d, "quiet", 1, 0)))  -- no ngx: no log
        local saved = rawget(_G, "ngx")
        local logged = {}
        rawset(_G, "ngx", { WARN = 5, now = function() return 1 end,
          log = function(_, ...) logged[#logged + 1] = table.concat({ ... })
          end })
        local ok = pcall(store.incr, d, "a\0key\\", 1, 0)
        rawset(_G, "ngx", saved)
        assert.is_true(ok)
        assert.equal(1, #logged)
        assert.matches("the lua_shared_dict (name unknown) is full: adding "
          .. "to key 'a\\000key\\\\'", logged[1], 1, true)
      end)
  end)

  describe("the exposition", function()
    it("writes every family with HELP and TYPE, samples sorted", function()
      local m = metrics.new("users_api", { shared = false })
      m:run(true, 2, nil, 1)
      m:run(false, 3, "max_attempts")
      metrics.new("a", { shared = false }):run(false, 1, "budget")
      local text = metrics.prometheus()
      -- luacheck: push no max line length
      local expect = [[
# HELP backoff_attempts_total Attempts made, first attempts and retries.
# TYPE backoff_attempts_total counter
backoff_attempts_total{name="a"} 1
backoff_attempts_total{name="users_api"} 5
# HELP backoff_retries_total Retries made: attempts after the first.
# TYPE backoff_retries_total counter
backoff_retries_total{name="users_api"} 3
# HELP backoff_successes_total Operations that succeeded.
# TYPE backoff_successes_total counter
backoff_successes_total{name="users_api"} 1
# HELP backoff_successes_after_retry_total Operations that succeeded after one or more retries.
# TYPE backoff_successes_after_retry_total counter
backoff_successes_after_retry_total{name="users_api"} 1
# HELP backoff_giveups_total Operations given up, by reason.
# TYPE backoff_giveups_total counter
backoff_giveups_total{name="a",reason="budget"} 1
backoff_giveups_total{name="users_api",reason="max_attempts"} 1
# HELP backoff_budget_refusals_total Retries refused by a retry budget.
# TYPE backoff_budget_refusals_total counter
backoff_budget_refusals_total{name="a"} 1
# HELP backoff_hints_honoured_total Retries that waited for a server's hint (Retry-After, RateLimit-Reset).
# TYPE backoff_hints_honoured_total counter
backoff_hints_honoured_total{name="users_api"} 1
# HELP backoff_hedges_total Hedges started: copies of a request sent while another was in flight.
# TYPE backoff_hedges_total counter
# HELP backoff_hedges_won_total Requests answered by a hedge.
# TYPE backoff_hedges_won_total counter
# HELP backoff_hedges_cancelled_total Copies of hedged requests cancelled once another answered.
# TYPE backoff_hedges_cancelled_total counter
# HELP backoff_hedge_budget_refusals_total Hedges refused by a retry budget (hedging then stopped for the request).
# TYPE backoff_hedge_budget_refusals_total counter
]]
      -- luacheck: pop
      assert.equal(expect, text)
    end)

    it("escapes backslashes and quotes in names", function()
      metrics.new('a "quoted" \\ name', { shared = false }):run(true, 1)
      metrics.new("café ☕", { shared = false }):run(true, 1)
      local text = metrics.prometheus()
      assert.matches(
        'backoff_attempts_total{name="a \\"quoted\\" \\\\ name"} 1',
        text, 1, true)
      assert.matches('backoff_attempts_total{name="café ☕"} 1', text, 1,
                     true)
    end)

    it("reads the dict's keys only, skipping keys that are not its own",
      function()
        local d = fake_dict()
        metrics.new("x", { shared = d }):run(true, 1)
        d.data["backoff\tnonsense\tx"] = 1
        d.data["backoff\tgiveups\tx"] = 1     -- no reason: not written
        d.data["backoff\tattempts\tx\textra"] = 1
        d.data["unrelated"] = 1
        local text = metrics.prometheus(d)
        local samples = 0
        for line in text:gmatch("[^\n]+") do
          if line:sub(1, 1) ~= "#" then samples = samples + 1 end
        end
        assert.equal(2, samples)              -- attempts and successes
        assert.matches('backoff_attempts_total{name="x"} 1', text, 1, true)
        assert.equal("", metrics.prometheus():match('name="x"') or "")
      end)

    it("prints integers as integers, other values exactly", function()
      local d = fake_dict()
      d.data["backoff\tattempts\tbig"] = 2.5
      d.data["backoff\tretries\tbig"] = 1e15
      d.data["backoff\tsuccesses\tbig"] = 1e20
      local text = metrics.prometheus(d)
      assert.matches('attempts_total{name="big"} 2.5', text, 1, true)
      assert.matches('successes_total{name="big"} 1e+20', text, 1, true)
      assert.matches('retries_total{name="big"} 1000000000000000', text, 1,
                     true)
    end)

    -- another writer's NaN was written as "-nan", which no Prometheus
    -- parser reads; a counter is a finite count >= 0
    -- one foreign key that is not UTF-8 under the prefix made the whole
    -- exposition unparsable; keys metrics could not have written are
    -- skipped (spec/nginx/http.lua parses the result with
    -- python3-prometheus-client)
    it("skips keys under its prefix that it could not have written",
      function()
        local d = fake_dict()
        metrics.new("ok", { shared = d }):run(false, 1, "max_attempts")
        for _, k in ipairs {
          "backoff\tattempts\t\255\254",          -- not UTF-8
          "backoff\tattempts\tcaf\195",            -- cut UTF-8
          "backoff\tattempts\ta\rb",              -- a control byte
          "backoff\tattempts\t",                  -- no name
          "backoff\tattempts\t" .. ("n"):rep(201),
          "backoff\tgiveups\tok\tbad reason",
          "backoff\tgiveups\tok\t\255",
          "backoff\tgiveups\tok\t" .. ("r"):rep(65),
        } do
          d.data[k] = 1
        end
        local text = metrics.prometheus(d)
        local samples = {}
        for line in text:gmatch("[^\n]+") do
          if line:sub(1, 1) ~= "#" then samples[#samples + 1] = line end
        end
        table.sort(samples)
        assert.same({
          'backoff_attempts_total{name="ok"} 1',
          'backoff_giveups_total{name="ok",reason="max_attempts"} 1',
        }, samples)
        assert.same({ max_attempts = 1 },
                    metrics.new("ok", { shared = d }):counts().giveups)
      end)

    it("skips values under its keys that are not counts", function()
      local d = fake_dict()
      local m = metrics.new("odd", { shared = d })
      m:run(true, 1)
      d.data["backoff\tretries\todd"] = 0 / 0
      d.data["backoff\tsuccesses\todd"] = -3
      d.data["backoff\tbudget_refusals\todd"] = math.huge
      d.data["backoff\tgiveups\todd\tbudget"] = "many"
      d.data["backoff\thints_honoured\todd"] = 1e308
      d.data["backoff\thints_honoured\todd\t"] = 1e308
      local text = metrics.prometheus(d)
      assert.is_nil(text:find("nan", 1, true))
      assert.is_nil(text:lower():find("[^+]inf"))
      assert.matches('attempts_total{name="odd"} 1', text, 1, true)
      assert.is_nil(text:find('retries_total{name="odd"}', 1, true))
      assert.is_nil(text:find('successes_total{name="odd"}', 1, true))
      assert.is_nil(text:find('budget_refusals_total{name="odd"}', 1, true))
      assert.is_nil(text:find('reason="budget"', 1, true))
      local c = m:counts()
      assert.same({ 1, 0, 0, 0 }, { c.attempts, c.retries, c.successes,
                                    c.budget_refusals })
      assert.same({}, c.giveups)
    end)

    it("is answered by collect() inside nginx", function()
      local saved = rawget(_G, "ngx")
      local printed = {}
      local fake = { header = {}, print = function(s)
        printed[#printed + 1] = s end }
      rawset(_G, "ngx", fake)
      metrics.new("c", { shared = false }):run(true, 1)
      metrics.collect()
      fake.headers_sent = true
      fake.header = {}
      metrics.collect()
      rawset(_G, "ngx", saved)
      assert.equal(2, #printed)
      assert.equal(metrics.prometheus(), printed[1])
      assert.equal(metrics.prometheus(), printed[2])
      assert.same({}, fake.header)          -- not touched once sent
    end)
  end)

  describe("arguments", function()
    it("refuses bad names by argument", function()
      local bad = { nil, "", ("x"):rep(201), "tab\there", "nl\nhere",
        "nul\0here", "del\127", "\255\254", "\192\128", "\237\160\128",
        "\244\144\128\128", "\226\130", 42, {}, true }
      for i = 1, 15 do
        assert.error_matches(function()
          metrics.new(bad[i], { shared = false })
        end, "bad argument #1 to 'new' (a name expected: 1 to 200 bytes "
          .. "of UTF-8 without control characters", nil, true)
      end
      assert.has_no.errors(function()
        metrics.new(("x"):rep(200), { shared = false })
      end)
    end)

    it("refuses bad options", function()
      assert.error_matches(function() metrics.new("a", 5) end,
        "backoff.metrics.new: options must be a table (got number)", nil,
        true)
      assert.error_matches(function() metrics.new("a", { dict = 1 }) end,
        "backoff.metrics.new: unknown option 'dict'", nil, true)
      for _, d in ipairs { 5, "d", {}, { incr = print }, io.stdout } do
        assert.error_matches(function() metrics.new("a", { shared = d }) end,
          "option 'shared' must be an ngx.shared dict (got ", nil, true)
      end
    end)

    it("needs a shared dict inside nginx, or shared = false", function()
      local saved = rawget(_G, "ngx")
      rawset(_G, "ngx", { get_phase = function() return "init" end,
        shared = {} })
      local ok, err = pcall(metrics.new, "a")
      -- a misspelled lua_shared_dict name gives nil
      local ok1, err1 = pcall(function()
        local m = metrics.new("a",    -- not a tail call: the line stays
          { shared = rawget(_G, "ngx").shared.backoff_metrcs })
        return m
      end)
      local ok2 = pcall(metrics.new, "a", { shared = false })
      local ok3, err3 = pcall(metrics.new, "a", { shared = "metrics" })
      rawset(_G, "ngx", saved)
      assert.is_false(ok)
      assert.is_false(ok1)
      for _, e in ipairs { err, err1 } do
        assert.matches("backoff.metrics.new: option 'shared' must be an "
          .. "ngx.shared dict inside nginx (got nil: a lua_shared_dict's "
          .. "name misspelled in ngx.shared.NAME gives nil too)", e, 1, true)
        assert.matches("/metrics shows one worker at a time; shared = "
          .. "false asks for that on purpose", e, 1, true)
      end
      assert.matches("^[^:]*24%-metrics_spec%.lua:%d+: ", err1) -- the caller
      assert.is_true(ok2)
      assert.is_false(ok3)
      assert.matches("option 'shared' must be an ngx.shared dict (got "
        .. "'metrics': the dict is ngx.shared[name], not its name)",
        err3, 1, true)
      assert.has_no.errors(function() metrics.new("a") end)  -- outside
    end)

    it("refuses bad counts and reasons, and counts nothing then",
      function()
        local m = metrics.new("a", { shared = false })
        local cases = {
          { { "yes", 1 }, "bad argument #1 to 'run' (boolean expected" },
          { { true, -1 }, "bad argument #2 to 'run' (an integer count" },
          { { true, 1.5 }, "bad argument #2 to 'run'" },
          { { true, 0 / 0 }, "bad argument #2 to 'run'" },
          { { true, 2 ^ 53 }, "bad argument #2 to 'run'" },
          { { true, 1, "x" }, "bad argument #3 to 'run' (a success has no "
            .. "reason" },
          { { false, 1 }, "bad argument #3 to 'run' (a reason expected" },
          { { false, 1, "bad reason" }, "bad argument #3 to 'run'" },
          { { false, 1, ("r"):rep(65) }, "bad argument #3 to 'run'" },
          { { true, 1, nil, 2 }, "bad argument #4 to 'run'" },
          { { true, 1, nil, -1 }, "bad argument #4 to 'run'" },
        }
        for _, c in ipairs(cases) do
          assert.error_matches(function() m:run(unpack(c[1], 1, 4)) end,
            c[2], nil, true)
        end
        local add_cases = {
          { { "attempt", 1 }, "bad argument #1 to 'add' (a counter name" },
          { { "attempts", -1 }, "bad argument #2 to 'add'" },
          { { "attempts", "1" }, "bad argument #2 to 'add'" },
          { { "giveups", 1 }, "bad argument #3 to 'add' (a reason expected" },
          { { "attempts", 1, "x" }, "bad argument #3 to 'add' (only "
            .. "'giveups' takes a reason" },
        }
        for _, c in ipairs(add_cases) do
          assert.error_matches(function() m:add(c[1][1], c[1][2], c[1][3])
          end, c[2], nil, true)
        end
        assert.same(ZERO, m:counts())
      end)

    it("refuses a bad self and a bad dict", function()
      local m = metrics.new("a", { shared = false })
      for _, f in ipairs { "run", "add", "counts" } do
        assert.error_matches(function() m[f]({}, true, 1) end,
          "calling '" .. f .. "' on bad self", nil, true)
      end
      for _, f in ipairs { "prometheus", "reset", "collect" } do
        assert.error_matches(function() metrics[f](5) end,
          "bad argument #1 to '" .. f .. "' (an ngx.shared dict or nil",
          nil, true)
      end
      assert.error_matches(function() metrics.collect() end,
        "backoff.metrics.collect: needs content_by_lua*", nil, true)
      assert.matches("^backoff.metrics: 'a' %(this process%)$", tostring(m))
    end)
  end)
end)
