-- backoff.store and backoff.store.window: the one store under every
-- shared object (CONTRIBUTING.md, "The store"), and the names that are
-- one per concept.
local store = require "backoff.store"
local window = require "backoff.store.window"
local backoff = require "backoff"
local budget = backoff.budget
local metrics = require "backoff.metrics"

-- a fake ngx with a log and a clock
local function with_ngx(now, f)
  local saved = rawget(_G, "ngx")
  local logged = {}
  rawset(_G, "ngx", { WARN = 5, NOTICE = 6, ERR = 4,
    now = function() return now[1] end,
    log = function(level, ...)
      logged[#logged + 1] = level .. " " .. table.concat({ ... })
    end })
  local ok, err = pcall(f, logged)
  rawset(_G, "ngx", saved)
  assert(ok, err)
  return logged
end

describe("store.dict of this Lua state", function()
  it("answers as an ngx.shared dict does", function()
    local t = { 0 }
    local d = store.dict(nil, function() return t[1] end)
    assert.same({ nil, "not found" }, { d:incr("k", 1) })
    assert.equal(3, d:incr("k", 1, 2))
    assert.equal(5, d:incr("k", 2))
    assert.is_true(d:set("s", "text"))
    assert.same({ nil, "not a number" }, { d:incr("s", 1) })
    assert.same({ false, "exists" }, { d:add("k", 1) })
    assert.is_true(d:add("a", 1, 10))
    assert.equal(0, d:ttl("k"))
    assert.equal(10, d:ttl("a"))
    t[1] = 9.5
    assert.equal(1, d:get("a"))
    t[1] = 10
    assert.is_nil(d:get("a"))                -- expired by the clock
    assert.is_true(d:add("a", 2, 5))
    local keys = d:get_keys(0)
    table.sort(keys)
    assert.same({ "a", "k", "s" }, keys)
    d:delete("k")
    assert.is_nil(d:get("k"))
    -- keys never meet the methods
    assert.equal(1, d:incr("get", 1, 0))
    assert.equal(1, d:get("get"))
  end)

  it("is the shared dict itself when one is given", function()
    local shared = {}
    assert.equal(shared, store.dict(shared))
  end)
end)

describe("store.incr", function()
  local function full()
    local d = store.dict()
    local incr = d.incr
    d.incr = function(self, ...)
      local v, err = incr(self, ...)
      return v, err, true                    -- evicted others
    end
    return d
  end

  it("passes init and ttl only when given", function()
    local n = {}
    local d = { incr = function(_, ...)
      n[#n + 1] = select("#", ...)
      return 1
    end }
    store.incr(d, "k", 1)
    store.incr(d, "k", 1, 0)
    store.incr(d, "k", 1, 0, 5)
    assert.same({ 2, 3, 4 }, n)   -- key, n [, init [, ttl]]
  end)

  it("says a full dict once per dict and minute, whatever the keys",
     function()
    local now = { 100 }
    local a, b = full(), full()
    local logged = with_ngx(now, function()
      for i = 1, 300 do store.incr(a, "key" .. i, 1, 0) end
      store.incr(b, "other", 1, 0)
      now[1] = 159
      store.incr(a, "late", 1, 0)
      now[1] = 160
      store.incr(a, "later", 1, 0)
    end)
    assert.equal(3, #logged)
    assert.matches("^5 backoff: the lua_shared_dict .* is full: adding to "
                   .. "key 'key1'", logged[1])
    assert.matches("key 'other'", logged[2], 1, true)
    assert.matches("key 'later'", logged[3], 1, true)
  end)
end)

describe("store.foreign", function()
  it("deletes the value, logs it once and says why", function()
    local d = store.dict()
    d:set("k", "junk")
    local msg
    local logged = with_ngx({ 1 }, function()
      msg = store.foreign(d, "k", "junk", "backoff.thing", "a count")
    end)
    assert.is_nil(d:get("k"))
    assert.equal(1, #logged)
    assert.equal("5 " .. msg, logged[1])
    assert.equal("backoff.thing: corrupt value under key 'k' ('junk'; not "
      .. "one it writes: a count expected): deleted, read as missing", msg)
  end)
end)

describe("store.now", function()
  it("raises at the caller's line in the C binding's wording", function()
    for _, v in ipairs { 0 / 0, math.huge, -math.huge, "soon", nil } do
      local ok, err = pcall(store.now, "backoff.thing",
                            function() return v end)
      assert.is_false(ok)
      assert.matches("backoff.thing: option 'clock' must return a finite "
                     .. "number (got ", err, 1, true)
    end
    assert.equal(5, store.now("x", function() return 5 end))
  end)

  it("is the one wording of every object's clock", function()
    local bad = function() return 0 / 0 end
    local objects = {
      function() return budget.ratio { clock = bad }:withdraw() end,
      function() return budget.adaptive { clock = bad }:withdraw() end,
      function() return budget.recommended { clock = bad }:withdraw() end,
      function() return backoff.breaker { clock = bad, failures = 1,
        failure_ratio = 0.5 }:record(false) end,
      function() return require("backoff.hedge").latency { clock = bad,
        shared = false }:delay() end,
    }
    for i, f in ipairs(objects) do
      local ok, err = pcall(f)
      assert.is_false(ok, i)
      assert.matches("option 'clock' must return a finite number (got nan)",
                     err, 1, true)
    end
  end)
end)

describe("store.window", function()
  local function clocked()
    local t = { 0 }
    return t, function() return t[1] end
  end

  for _, shared in ipairs { false, true } do
    local label = shared and "shared" or "in-process"
    it(label .. ": sums the span, forgets what left it", function()
      local t, clock = clocked()
      local d = shared and store.dict(nil, clock) or nil
      local w = window.new { who = "t", span = 10, slices = 10,
                             clock = clock, dict = d, prefix = "p:" }
      for s = 0, 9 do
        t[1] = s + 0.5
        w:add("a", 1)
        w:add("b", 2)
      end
      assert.equal(10, w:sum("a"))
      assert.equal(20, w:sum("b"))
      t[1] = 12.5                            -- slices 0, 1, 2 left
      assert.equal(7, w:sum("a"))
      t[1] = 11                              -- back: no time passed
      assert.equal(7, w:sum("a"))
      t[1] = 100
      assert.equal(0, w:sum("a"))
      -- a slice in the span takes what is added to it
      local i = w:slice()
      w:add("a", 5, i)
      w:add("a", -2, i)
      assert.equal(3, w:sum("a"))
      assert.equal(3, w:get("a", i))
      assert.equal(0, w:get("a", i - 1))
    end)
  end

  it("shared: one key per series and slice, a foreign value counted 0, "
     .. "deleted", function()
    local t, clock = clocked()
    local d = store.dict(nil, clock)
    local w = window.new { who = "t", span = 10, slices = 10, clock = clock,
      dict = d, prefix = "p:", lo = 0, hi = 100 }
    t[1] = 36.5                              -- slice 36 = "10"
    w:add(":r", 3)
    assert.equal(3, d:get("p:10:r"))
    for _, v in ipairs { "x", 0 / 0, -1, 101, 1.5 } do
      d:set("p:10:r", v)
      assert.equal(0, w:sum(":r"))
      assert.is_nil(d:get("p:10:r"))
    end
    -- a write that meets one: deleted, made afresh on the missing key
    -- (an incr judges the sum: -1 + 1 lands in range, unseen)
    for _, v in ipairs { "x", 0 / 0, -5, 101, 1.5 } do
      d:set("p:10:r", v)
      assert.equal(36, w:add(":r", 1))
      assert.equal(1, d:get("p:10:r"))
      assert.equal(1, w:sum(":r"))
      d:delete("p:10:r")
    end
  end)
end)

describe("one name per concept", function()
  it("budget.ratio's window is in seconds (ttl was its name)", function()
    local b = budget.ratio { window = 30 }
    assert.equal(30, b:window())
    assert.error_matches(function() budget.ratio { ttl = 10 } end,
      "backoff.budget.ratio: unknown option 'ttl' (renamed 'window' in "
      .. "0.3.0)", nil, true)
  end)

  it("budget.earned counts attempts in its memory, not a window",
     function()
    local b = budget.earned { memory = 50 }
    assert.equal(50, b:memory())
    assert.error_matches(function() budget.earned { window = 50 } end,
      "backoff.budget.earned: unknown option 'window' (renamed 'memory' "
      .. "in 0.3.0)", nil, true)
    assert.error_matches(function() budget.recommended { window = 50 } end,
      "backoff.budget.recommended: unknown option 'window'", nil, true)
  end)

  it("every shared object takes its name as option 'key', with defaults "
     .. "in one style", function()
    local m = metrics.new { key = "api", shared = false }
    assert.matches("'api'", tostring(m), 1, true)
    assert.error_matches(function() metrics.new { shared = false } end,
      "backoff.metrics.new: option 'key' must be a name (got nil)", nil,
      true)
    assert.error_matches(function()
      metrics.new("api", { key = "api", shared = false })
    end, "give the name once", nil, true)
    assert.equal("backoff:breaker", backoff.breaker {}:key())
    local bud = budget.token_bucket { shared = store.dict() }
    assert.matches("^backoff:budget|", bud:dict_key())
  end)

  it("a wrong policy has one message, naming the function called",
     function()
    local doors = {
      { "backoff.retry", function(p) return backoff.retry(p, print) end },
      { "backoff.http.request", function(p)
          return require("backoff.http").request(p, print, {}) end },
      { "backoff.hedge.request", function(p)
          return require("backoff.hedge").request(p, print, {}) end },
    }
    for _, d in ipairs(doors) do
      local ok, err = pcall(d[2], 42)
      assert.is_false(ok)
      assert.matches(d[1] .. ": argument 'policy' must be a backoff object",
                     err, 1, true)
      assert.matches("(got number)", err, 1, true)
    end
  end)

  it("a method called on something else: one message, at the caller's "
     .. "line", function()
    local hedge = require "backoff.hedge"
    local objects = {
      { budget.token_bucket {}, "withdraw", "backoff.budget" },
      { budget.ratio {}, "withdraw", "backoff.budget.ratio" },
      { budget.recommended(), "tokens", "backoff.budget.earned" },
      { budget.grpc {}, "max_tokens", "backoff.budget.grpc" },
      { backoff.breaker {}, "allow", "backoff.breaker" },
      { hedge.latency { shared = false }, "delay", "backoff.hedge.latency" },
      { hedge.pace { shared = false }, "allow", "backoff.hedge.pace" },
      { metrics.new("x", { shared = false }), "add",
        "backoff.metrics recorder" },
    }
    for _, o in ipairs(objects) do
      local obj, method, who = o[1], o[2], o[3]
      local ok, err = pcall(function()
        local r = obj[method]({})           -- no tail call: a line
        return r
      end)
      assert.is_false(ok)
      assert.matches("47%-store_spec%.lua:%d+: calling '" .. method
        .. "' on bad self %(" .. who:gsub("%.", "%%.") .. " expected, got "
        .. "table%)$", err)
    end
  end)

  it("the operation raising: in every door nothing is counted, a probe "
     .. "is given back, the error goes on as it came", function()
    local http = require "backoff.http"
    local t = { 0 }
    local clock = function() return t[1] end
    local doors = {
      function(p, br, m, f)
        return backoff.retry(p, f, { breaker = br, metrics = m })
      end,
      function(p, br, m, f)
        return http.request(p, f, { method = "GET", breaker = br,
                                    metrics = m })
      end,
    }
    for i, door in ipairs(doors) do
      local br = backoff.breaker { failures = 1, clock = clock, probes = 1,
        policy = backoff.constant { delay = 1 } }
      br:record(false)                        -- open
      t[1] = t[1] + 2                         -- half-open: one probe
      local m = metrics.new("raise" .. i, { shared = false })
      local p = backoff.constant { delay = 0, max_attempts = 3 }
      local ok, err = pcall(door, p, br, m, function() error({ bug = i }) end)
      assert.is_false(ok)
      assert.same({ bug = i }, err)           -- as it came
      -- the probe's slot is free again: the next caller probes at once
      local probe, ticket = br:allow()
      assert.is_true(probe, "door " .. i)
      assert.equal("table", type(ticket))
      br:release(ticket)
      assert.equal(0, m:counts().attempts + m:counts().successes)
      assert.same({}, m:counts().giveups)
    end
  end)
end)
