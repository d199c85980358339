-- Hostile input to every budget kind: each option and each method
-- argument refuses NaN, infinities, negatives, fractions where a count
-- is needed, wrong types and wrong selves, with a message naming it, and
-- the budget is exactly as it was after the error.

local budget = require "backoff.budget"
local new_dict = dofile("spec/budget_dict.lua")

local NAN, INF = 0 / 0, math.huge
local clock = function() return 50 end
local draw = function() return 0.5 end

-- constructor, its name in messages, and bad values per option with the
-- words the message must hold
local COUNT = "must be an integer >= 0 and <= "
local CASES = {
  { ctor = budget, name = "backoff.budget", opts = {
      capacity = { NAN, INF, -1, 2.5, "5", true, {}, 2 ^ 53 + 2 },
      cost = { NAN, -INF, -5, 0.5, "1", false },
      refund = { NAN, INF, -1, 1.5, print } },
    rule = COUNT },
  { ctor = budget.grpc, name = "backoff.budget.grpc", opts = {
      max_tokens = { NAN, INF, 0, -1, 2.5, 1001, "10", {} },
      token_ratio = { NAN, INF, -INF, 0, -0.1, 0.0004, 1001, "0.1",
                      true } } },
  { ctor = budget.earned, name = "backoff.budget.earned", opts = {
      capacity = { NAN, INF, -1, 1.5, 2 ^ 31, "8" },
      cost = { NAN, -1, 0.25, "1" },
      earn = { NAN, INF, -0.5, 1001, "6" },
      memory = { NAN, INF, 0, 0.5, -3, 2 ^ 21, "200" },
      throttle_cost = { NAN, INF, -1, 1.5, "9" },
      timeout_cost = { NAN, INF, -1, 1.5, "6", true },
      per_request = { NAN, INF, -INF, -0.01, 1001, "0.08", true },
      per_failure = { NAN, INF, -2, 1000.5, "2", {} },
      per_recovery = { NAN, INF, -0.5, 1000.5, "5", false },
      span = { NAN, INF, -1, 2.5, 3601, "10" },
      clock = { 5, "now", {}, true } } },
  { ctor = budget.ratio, name = "backoff.budget.ratio", opts = {
      window = { NAN, INF, 0, 0.5, 61, -10, "10" },
      percent = { NAN, INF, -1, 0.001, 100001, "20" },
      min_per_second = { NAN, INF, -1, 2 ^ 21, "10" },
      clock = { 5, "now", {}, true } } },
  { ctor = budget.adaptive, name = "backoff.budget.adaptive", opts = {
      k = { NAN, INF, 0, -2, 1001, "2" },
      window = { NAN, INF, 0, 0.5, 86401, "120" },
      clock = { 5, {}, false },
      random = { 0.5, "math.random", {} } } },
}

describe("budget constructors refuse bad options", function()
  for _, c in ipairs(CASES) do
    it(c.name .. ": every option, every kind of bad value", function()
      for opt, bads in pairs(c.opts) do
        for _, v in ipairs(bads) do
          for _, shared in ipairs { false, true } do
            local o = { [opt] = v }
            if shared then o.shared = new_dict() end
            local ok, err = pcall(c.ctor, o)
            assert.is_false(ok, opt .. " = " .. tostring(v))
            assert.matches(c.name .. ": option '" .. opt .. "' must be",
                           err, 1, true)
            if type(v) == "number" and v ~= v then
              assert.matches("(got nan)", err, 1, true)
            end
          end
        end
      end
    end)

    it(c.name .. ": unknown options, non-tables, bad shared and key",
       function()
      for _, o in ipairs { { colour = 1 }, { [1] = 2 }, { shard = {} } } do
        local ok, err = pcall(c.ctor, o)
        assert.is_false(ok)
        assert.matches(c.name .. ": unknown option", err, 1, true)
      end
      for _, o in ipairs { 5, "x", true } do
        local ok, err = pcall(c.ctor, o)
        assert.is_false(ok)
        assert.matches("options must be a table", err, 1, true)
      end
      for _, d in ipairs { 5, "dict", {}, { incr = 1, get = 2 } } do
        local ok, err = pcall(c.ctor, { shared = d })
        assert.is_false(ok)
        assert.matches("option 'shared' must be an ngx.shared dict", err,
                       1, true)
      end
      for _, k in ipairs { "", 5, {}, true } do
        local ok, err = pcall(c.ctor, { shared = new_dict(), key = k })
        assert.is_false(ok)
        assert.matches("option 'key' must be a non-empty string", err, 1,
                       true)
      end
    end)
  end

  it("recommended takes shared, key and clock only", function()
    local ok, err = pcall(budget.recommended, { capacity = 3 })
    assert.is_false(ok)
    assert.matches("backoff.budget.recommended: unknown option 'capacity'",
                   err, 1, true)
    for _, o in ipairs { { span = 0 }, { per_request = 1 } } do
      ok = pcall(budget.recommended, o)
      assert.is_false(ok)
    end
    ok, err = pcall(budget.recommended, { clock = 5 })
    assert.is_false(ok)
    assert.matches("backoff.budget.recommended: option 'clock' must be a "
                   .. "function", err, 1, true)
    assert.is_true(pcall(budget.recommended, { clock = clock }))
    ok, err = pcall(budget.recommended, 7)
    assert.is_false(ok)
    assert.matches("options must be a table (got number)", err, 1, true)
    ok, err = pcall(budget.recommended, { key = "k" })
    assert.is_false(ok)
    assert.matches("option 'shared' must be an ngx.shared dict", err, 1,
                   true)
  end)

  it("raises at the caller's line", function()
    local line = debug.getinfo(1, "l").currentline + 1
    local ok, err = pcall(function() budget.grpc { max_tokens = -1 } end)
    assert.is_false(ok)
    assert.matches(":" .. line .. ":", err, 1, true)
  end)
end)

-- every kind, in-process and shared, with a twin fed only the valid
-- calls: after each bad call the two must still agree
local MAKERS = {
  { "token bucket", function(d) return budget { shared = d } end },
  { "grpc", function(d) return budget.grpc { shared = d } end },
  { "earned", function(d) return budget.earned { shared = d } end },
  { "ratio", function(d)
      return budget.ratio { shared = d, clock = clock, percent = 50,
                            min_per_second = 1 }
    end },
  { "adaptive", function(d)
      return budget.adaptive { shared = d, clock = clock, random = draw }
    end },
}

local BAD_COUNTS = { NAN, INF, -INF, -1, 2.5, 2 ^ 53 + 2, "1", true, {},
                     print }

for _, m in ipairs(MAKERS) do
  for _, shared in ipairs { false, true } do
    local label = m[1] .. (shared and " (shared)" or " (in-process)")
    describe(label .. " methods refuse bad arguments", function()
      local function pair()
        return m[2](shared and new_dict() or nil),
               m[2](shared and new_dict() or nil)
      end
      local function same(a, b)
        assert.equal(b:tokens(), a:tokens())
        assert.equal(b:allows(), a:allows())
      end

      it("withdraw, allows, deposit: a bad count raises, nothing changes",
         function()
        local a, b = pair()
        for _, x in ipairs { a, b } do
          x:record(false, 1)
          x:withdraw()
        end
        for _, v in ipairs(BAD_COUNTS) do
          for _, meth in ipairs { "withdraw", "allows", "deposit" } do
            -- pcall(b.m, b, v): lauxlib counts self, so v is #2
            local ok, err = pcall(a[meth], a, v)
            assert.is_false(ok, meth .. "(" .. tostring(v) .. ")")
            assert.matches("bad argument #2 to '" .. meth .. "'", err, 1,
                           true)
            ok, err = pcall(function() return a[meth](a, v) end)
            assert.is_false(ok)
            assert.matches("bad argument #2 to '" .. meth .. "'", err, 1,
                           true)
            ok, err = pcall(function()   -- a method call, not a tail call
              local r
              if meth == "withdraw" then r = a:withdraw(v)
              elseif meth == "allows" then r = a:allows(v)
              else r = a:deposit(v) end
              return r
            end)
            assert.is_false(ok)
            assert.matches("bad argument #1 to '" .. meth .. "'", err, 1,
                           true)
            assert.matches("must be an integer >= 0", err, 1, true)
            same(a, b)
          end
        end
        assert.equal(b:withdraw(), a:withdraw())
        same(a, b)
      end)

      it("record: ok must be a boolean, attempt an integer >= 1, cost a "
         .. "count", function()
        local a, b = pair()
        -- numbered as for a:record(...)
        local cases = {
          { { nil }, "#1", "ok must be a boolean" },
          { { 1 }, "#1", "ok must be a boolean" },
          { { "true" }, "#1", "ok must be a boolean" },
          { { true, 0 }, "#2", "attempt must be an integer >= 1" },
          { { true, NAN }, "#2", "(got nan)" },
          { { false, INF }, "#2", "attempt must be" },
          { { true, 1.5 }, "#2", "attempt must be" },
          { { true, "2" }, "#2", "attempt must be" },
          { { true, 2, -5 }, "#3", "cost must be an integer >= 0" },
          { { false, 2, NAN }, "#3", "cost must be" },
          { { true, 2, {} }, "#3", "cost must be" },
        }
        for _, c in ipairs(cases) do
          local ok, err = pcall(function()
            a:record(c[1][1], c[1][2], c[1][3])
          end)
          assert.is_false(ok)
          assert.matches("bad argument " .. c[2] .. " to 'record'", err, 1,
                         true)
          assert.matches(c[3], err, 1, true)
          same(a, b)
        end
      end)

      it("every method refuses a wrong self", function()
        local a = pair()
        local others = { nil, {}, "x", 5, io.stdout, budget {},
                         budget.grpc {}, budget.earned {},
                         budget.ratio { clock = clock } }
        for _, meth in ipairs { "withdraw", "allows", "record", "deposit",
                                "tokens" } do
          for i = 1, 9 do
            local o = others[i]
            if getmetatable(o) ~= getmetatable(a) then
              local ok, err = pcall(a[meth], o, true)
              assert.is_false(ok, meth)
              assert.is_string(err)
              assert.truthy(err:find("bad self", 1, true)
                            or err:find("bad argument #1", 1, true), err)
            end
          end
        end
      end)
    end)
  end
end

describe("a misbehaving clock or draw", function()
  it("is an error naming the option, not a NaN in the counts", function()
    for _, v in ipairs { NAN, INF, "soon", nil } do
      local b = budget.ratio { clock = function() return v end }
      local ok, err = pcall(b.withdraw, b)
      assert.is_false(ok)
      assert.matches("option 'clock' must return a finite number (got",
                     err, 1, true)
    end
    for _, v in ipairs { NAN, -0.1, 1.5, "x" } do
      local b = budget.adaptive { clock = clock,
                                  random = function() return v end }
      b:record(false, 1)
      local ok, err = pcall(b.withdraw, b)
      assert.is_false(ok)
      assert.matches("option 'random' returned", err, 1, true)
    end
  end)

  -- a finite clock far from 0 made floor(now / slice) a float whose + 1
  -- is itself: the loops over the window's slices never ended
  it("far from 0 (2^53, 1e308, -1e308) neither hangs nor gives NaN",
     function()
    local kinds = {
      function(c, d) return budget.ratio { clock = c, shared = d } end,
      function(c, d) return budget.adaptive { clock = c, shared = d,
                                              random = draw } end,
      function(c, d) return budget.earned { clock = c, shared = d } end,
    }
    for _, v in ipairs { 2 ^ 53, 2 ^ 60, 1e308, -1e308, -2 ^ 63 } do
      local now = 0
      for _, make in ipairs(kinds) do
        for _, d in ipairs { false, true } do
          local b = make(function() return now end, d and new_dict() or nil)
          b:record(true, 1)
          now = v
          -- a count hook turns a hang into an error (compiled LuaJIT
          -- code ignores hooks: run it interpreted)
          if jit then jit.off() jit.flush() end
          debug.sethook(function() error("hung") end, "", 1e7)
          local ok, err = pcall(function()
            b:record(false, 1)
            b:withdraw()
            b:allows()
            b:deposit()
            b:record(true, 2)
            now = v + 1e6
            return b:tokens()
          end)
          debug.sethook()
          if jit then jit.on() end
          assert.is_true(ok, tostring(v) .. ": " .. tostring(err))
          assert.is_true(err >= 0 and err < INF, tostring(v))
          now = 0
        end
      end
    end
  end)
end)

describe("a foreign number in range under a shared key", function()
  -- within +-2^50 a slice cannot be told from counts in flight, but a
  -- count of requests or accepts is never negative
  it("gives adaptive counts() that are never negative", function()
    for _, v in ipairs { -1, -1e15, -0.0 } do
      local d = new_dict()
      local b = budget.adaptive { shared = d, clock = clock, random = draw }
      b:record(true, 1)
      for k in pairs(d.data) do d.data[k] = v end
      local r, a = b:counts()
      assert.is_true(r >= 0 and 1 / r > 0, tostring(r))
      assert.is_true(a >= 0 and 1 / a > 0, tostring(a))
      local t = b:tokens()
      assert.is_true(t >= 0 and t <= 1, tostring(t))
    end
  end)

  -- the token bucket's tokens() passed a foreign -0 on as -0
  it("gives tokens() and deposit() that are never -0, in every kind",
    function()
      for _, c in ipairs(CASES) do
        local d = new_dict()
        local o = { shared = d }
        if c.opts.clock then o.clock = clock end
        if c.opts.random then o.random = draw end
        local b = c.ctor(o)
        b:record(true, 1)
        b:withdraw()
        b:record(false, 2)
        for k in pairs(d.data) do d.data[k] = -0.0 end
        local t = b:tokens()
        assert.is_true(t >= 0 and 1 / t > 0, c.name .. " " .. tostring(t))
        local r = b:deposit(0)
        if r ~= nil then
          assert.is_true(r >= 0 and 1 / r > 0, c.name .. " " .. tostring(r))
        end
      end
    end)
end)

-- Inside nginx a budget kept by one worker counts one worker: a host of
-- N workers would retry N times what it says.  So there, `shared` is
-- required (a misspelled ngx.shared.NAME is nil too), unless it is
-- false: one budget per worker, asked for on purpose.
describe("a budget inside nginx", function()
  local CTORS = {
    { "backoff.budget", budget }, { "backoff.budget", budget.token_bucket },
    { "backoff.budget.grpc", budget.grpc },
    { "backoff.budget.earned", budget.earned },
    { "backoff.budget.recommended", budget.recommended },
    { "backoff.budget.ratio", budget.ratio },
    { "backoff.budget.adaptive", budget.adaptive },
  }
  local saved
  before_each(function()
    saved = rawget(_G, "ngx")
    rawset(_G, "ngx", { get_phase = function() return "init" end,
                        shared = {} })
  end)
  after_each(function() rawset(_G, "ngx", saved) end)

  it("refuses a missing or misspelled shared, naming it and the cause",
     function()
    for _, c in ipairs(CTORS) do
      local misspelled = rawget(_G, "ngx").shared.retry_budgte   -- nil
      for _, o in ipairs { false, {}, { shared = misspelled },
                           { key = "api" } } do
        local ok, err = pcall(c[2], o or nil)
        assert.is_false(ok, c[1])
        assert.matches(c[1] .. ": option 'shared' must be an ngx.shared "
          .. "dict inside nginx (got nil: a lua_shared_dict's name "
          .. "misspelled in ngx.shared.NAME gives nil too); without it "
          .. "each worker keeps its own budget, and a host of N workers "
          .. "acts N times over; shared = false asks for that on purpose",
          err, 1, true)
      end
    end
  end)

  it("refuses what is not a dict", function()
    for _, c in ipairs(CTORS) do
      for _, d in ipairs { 5, "retry_budget", {}, { incr = 1, get = 2 },
                           true } do
        local ok, err = pcall(c[2], { shared = d })
        assert.is_false(ok, c[1])
        assert.matches(c[1] .. ": option 'shared' must be an ngx.shared "
          .. "dict (got ", err, 1, true)
        assert.matches("or false for one budget per worker", err, 1, true)
      end
    end
  end)

  it("raises at the caller's line", function()
    local line = debug.getinfo(1, "l").currentline + 1
    local ok, err = pcall(function() budget.recommended() end)
    assert.is_false(ok)
    assert.matches(":" .. line .. ":", err, 1, true)
  end)

  it("takes a dict, or shared = false for one per worker", function()
    for _, c in ipairs(CTORS) do
      local d = new_dict()
      local b = c[2] { shared = d, clock = c[1]:find("earned")
                       and clock or nil }
      assert.is_string(b:dict_key(), c[1])
      local w = c[2] { shared = false }
      assert.is_true(w:allows(0) or w:tokens() >= 0)
      -- a worker's own: no dict, so key makes no sense
      local ok, err = pcall(c[2], { shared = false, key = "api" })
      assert.is_false(ok)
      assert.matches("option 'shared' must be an ngx.shared dict (got "
        .. "false; option 'key' names a key in it, so it needs shared)",
        err, 1, true)
    end
  end)

  it("keeps per process outside nginx, where no dict is needed",
     function()
    rawset(_G, "ngx", saved)
    for _, c in ipairs(CTORS) do
      local b = c[2]()
      assert.is_true(b:withdraw(0))
      local ok, err = pcall(c[2], { key = "api" })
      assert.is_false(ok)
      assert.matches("option 'shared' must be an ngx.shared dict (got "
        .. "nil; option 'key' names a key in it, so it needs shared)",
        err, 1, true)
    end
  end)
end)
