-- The run object (lua/backoff/engine.lua): the engine's four exports,
-- a door described by a constant table, the run's methods for a door
-- that waits and for one that does not, and no door writing a run's
-- fields.  Fake time throughout.
local backoff = require "backoff"
local engine = require "backoff.engine"
local setup = require "backoff.setup"

local function world()
  local w = { now = 0 }
  function w.clock() return w.now end
  function w.sleep(d) w.now = w.now + d end
  return w
end

-- a budget that logs and allows `tokens` withdrawals
local function fake_budget(tokens)
  local b = { tokens = tokens, log = {} }
  function b:withdraw(c, n)
    self.log[#self.log + 1] = { "withdraw", c, n }
    if self.tokens < 1 then return false end
    self.tokens = self.tokens - 1
    return true
  end
  function b:record(ok, attempt, paid)
    self.log[#self.log + 1] = { "record", ok, attempt, paid }
  end
  return b
end

-- a breaker that logs; allow() hands out tickets 1, 2, ...
local function fake_breaker()
  local br = { log = {}, n = 0 }
  function br:allow()
    self.n = self.n + 1
    return true, self.n
  end
  function br.allows() return true end
  function br:record(ok, ticket) self.log[#self.log + 1] = { "record", ok,
                                                              ticket } end
  function br:release(ticket) self.log[#self.log + 1] = { "release",
                                                           ticket } end
  return br
end

-- the file require loads a module from (package.searchpath, which
-- Lua 5.1 lacks)
local function source_of(module)
  local file = module:gsub("%.", "/")
  for template in package.path:gmatch("[^;]+") do
    local path = template:gsub("%?", file)
    local f = io.open(path)
    if f then
      f:close()
      return path
    end
  end
  return nil
end

describe("the engine", function()
  it("exports four entry points, and the run the rest", function()
    local names = {}
    for k in pairs(engine) do names[#names + 1] = k end
    table.sort(names)
    assert.same({ "first_success", "resume", "run", "start" }, names)
  end)

  it("leaves a run's fields to the engine: no door assigns one", function()
    for _, name in ipairs { "runner", "http", "balancer", "hedge",
                            "hedge.gate" } do
      -- where require finds it: the checkout, or an installed rock
      local path = assert(source_of("backoff." .. name))
      local f = assert(io.open(path))
      local src = f:read("*a")
      f:close()
      for line in src:gmatch("[^\n]+") do
        local code = line:gsub("%-%-.*", "")
        assert.is_nil(code:match("run%.[%w_]+%s*=[^=]")
                      or code:match("run%.[%w_]+%s*,[%w_%.%s,]*=[^=]"),
                      path .. ": " .. line)
      end
    end
  end)
end)

describe("a run, for a door that waits", function()
  local w, p, DOOR
  before_each(function()
    w = world()
    p = backoff.constant { delay = 1, max_attempts = 3, clock = w.clock }
    DOOR = { who = "door.test", waits = true }
  end)

  it("decides, waits with run.sleep and starts the next attempt", function()
    local bud = fake_budget(5)
    local run = engine.run(DOOR, p, setup.facts(p), nil,
                           { budget = bud, sleep = w.sleep })
    assert.equal(1, run.attempt)
    assert.same({ 2 }, { run:retry("down") })
    assert.equal(1, w.now)
    assert.same({ 3 }, { run:retry("down") })
    local gave
    run = engine.run(DOOR, p, setup.facts(p), nil, { sleep = w.sleep,
      on_giveup = function(err, reason, n) gave = { err, reason, n } end })
    run:retry("a")
    run:retry("b")
    assert.same({ nil, "max_attempts" }, { run:retry("c") })
    assert.same({ "c", "max_attempts", 3 }, gave)
    assert.equal("withdraw", bud.log[2][1])
  end)

  it("ends a request that is not idempotent once a failure was sent",
    function()
      local gave
      local ropts = { sleep = w.sleep,
        on_giveup = function(_, reason) gave = reason end }
      local run = engine.run(DOOR, p, setup.facts(p), nil, ropts, false)
      assert.same({ 2 }, { run:retry("refused", nil, nil, false) })
      assert.same({ nil, "not_idempotent" },
                  { run:retry("reset", nil, nil, true) })
      assert.equal("not_idempotent", gave)
      -- idempotent (or no word): a failure that was sent is retried
      run = engine.run(DOOR, p, setup.facts(p), nil, ropts, true)
      assert.same({ 2 }, { run:retry("reset", nil, nil, true) })
      run = engine.run(DOOR, p, setup.facts(p), nil, ropts)
      assert.same({ 2 }, { run:retry("reset", nil, nil, true) })
    end)

  it("bounds a server's hint by the door's max_hint when ropts has none",
    function()
      DOOR.max_hint = 5
      local run = engine.run(DOOR, p, setup.facts(p), nil,
                             { sleep = w.sleep })
      assert.same({ nil, "retry_after" }, { run:retry("busy", nil, 6) })
      run = engine.run(DOOR, p, setup.facts(p), nil,
                       { sleep = w.sleep, max_hint = 10 })
      assert.same({ 2 }, { run:retry("busy", nil, 6) })
      assert.equal(6, w.now)
    end)
end)

describe("a run, for a door that does not wait", function()
  local w, p, f
  before_each(function()
    w = world()
    p = backoff.constant { delay = 1, max_attempts = 3, clock = w.clock,
                           max_actual_duration = 10,
                           adjust_timeout_factor = 0.001,
                           min_adjust_timeout = 0.001 }
    f = setup.facts(p)
  end)

  it("takes the door's floors on the timeout and min_attempt_time",
    function()
      local DOOR = { who = "door.test", waits = false, left_timeout = true,
                     min_attempt = 0.5, min_timeout = 0.25 }
      local run = engine.run(DOOR, p, f, nil, { min_attempt_time = 0.1 })
      assert.equal(0.25, run.timeout)
      assert.equal(0.5, run.min_attempt)
      run = engine.run(DOOR, p, f, nil, { min_attempt_time = 2 })
      assert.equal(2, run.min_attempt)
    end)

  it("keeps a record per copy: paid, told, or given back", function()
    local DOOR = { who = "door.test", waits = false, copies = true }
    local bud, br = fake_budget(5), fake_breaker()
    local run = engine.run(DOOR, p, f, nil, { budget = bud, breaker = br })
    assert.is_nil(run.ticket)                 -- the first copy's, now
    local _, n2 = run:copy()
    local _, n3 = run:copy()
    assert.same({ 2, 3 }, { n2, n3 })
    assert.is_true(run:spent())
    assert.same({ nil, "max_attempts" }, { run:copy() })
    run:tell_copy(3, true, 0.1)
    run:forget(2)
    run:tell_copy(1, false, 0.2)
    assert.same({ { "record", true, 3 }, { "release", 2 },
                  { "record", false, 1 } }, br.log)
    assert.same({ { "withdraw", nil, 2 }, { "withdraw", nil, 3 },
                  { "record", true, 3, nil }, { "record", false, 1, nil } },
                bud.log)
  end)

  it("grants, refuses and settles the balancer's tries", function()
    local DOOR = { who = "door.test", waits = false }
    local bud, br = fake_budget(1), fake_breaker()
    local gave
    local run = engine.run(DOOR, p, f, nil, { budget = bud, breaker = br,
      on_giveup = function(_, reason, n) gave = { reason, n } end })
    assert.is_true(run:reserve())
    assert.is_truthy(run:retry_now())         -- granted, paid: try 2
    assert.equal(2, run.attempt)
    run:capped()                              -- nginx's cap
    assert.same({ nil, "next_upstream_tries" }, { run:reserve() })
    assert.same({ nil, "budget" }, { run:retry_now() })   -- none left
    assert.same({ nil, "budget" }, { run:retry_now() })   -- at once
    run:settle(false, "next_upstream")
    run:settle(false, "next_upstream")        -- once
    assert.same({ "budget", 2 }, gave)
    assert.same({ { "record", false, 1 }, { "record", false, 2 },
                  { "release", 3 } }, br.log)     -- admitted, unpaid
  end)

  it("says when the deadline has passed", function()
    local run = engine.run({ who = "door.test", waits = false }, p, f)
    assert.is_false(run:overdue())
    assert.equal(10, run:left())
    w.now = 10
    assert.is_true(run:overdue())
    assert.equal("max_actual_duration", run:hint_stop(0))
  end)
end)
