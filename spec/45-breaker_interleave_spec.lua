-- The breaker's races, under every interleaving of two or three
-- "workers": each is a coroutine with its own breaker object on one fake
-- ngx.shared dict, and yields after every dict call, so the explorer
-- below chooses the order of every atomic step and tries them all
-- (nginx workers are processes: between two dict calls of one worker
-- any number of calls of the others may land, which is what this
-- explores).  doc/breaker.md, "Races", says what must hold; each
-- scenario checks it after every schedule.
local backoff = require "backoff"
local breaker = require "backoff.breaker"
local new_dict = dofile("spec/breaker_dict.lua")

-- Runs scenario() under every schedule.  scenario(w) -> setup, bodies,
-- check: setup() runs alone (no yields); bodies[i]() is worker i; after
-- all are done check(log) runs, log being the transitions seen.  The
-- schedules are explored depth first, replaying the scenario from
-- scratch for each.  Returns the number of schedules.  With `runs`,
-- that many schedules drawn at random instead (a fixed stream: the same
-- on every Lua), where there are too many to try them all.
local rng = require("spec.helpers").park_miller
local function explore(scenario, runs)
  local count, prefix = 0, {}
  local rand = runs and rng(7)
  while true do
    local w = { t = 1000, log = {} }
    w.clock = function() return w.t end
    w.dict = new_dict(w.clock)
    local stepping = false
    w.dict.after = function() if stepping then coroutine.yield() end end
    local setup, bodies, check = scenario(w)
    setup()
    local live = {}
    for i, body in ipairs(bodies) do
      live[#live + 1] = { id = i, co = coroutine.create(body) }
    end
    local choices, widths, depth = {}, {}, 0
    while #live > 0 do
      depth = depth + 1
      local c = rand and rand(#live) or prefix[depth] or 1
      choices[depth], widths[depth] = c, #live
      stepping = true
      local ok, err = coroutine.resume(live[c].co)
      stepping = false
      assert(ok, err)
      if coroutine.status(live[c].co) == "dead" then table.remove(live, c) end
    end
    check(w.log)
    count = count + 1
    if rand then
      if count >= runs then return count end
    else
      -- the next schedule: the last choice that has an untried sibling
      local i = depth
      while i > 0 and choices[i] >= widths[i] do i = i - 1 end
      if i == 0 then return count end
      prefix = {}
      for j = 1, i - 1 do prefix[j] = choices[j] end
      prefix[i] = choices[i] + 1
    end
  end
end

-- a worker's breaker on w's dict; its transitions go to w.log
local function worker(w, name, o)
  local opts = { shared = w.dict, key = "api", clock = w.clock,
    policy = backoff.exponential { initial_delay = 1, seed = 1 },
    on_change = function(from, to, info)
      w.log[#w.log + 1] = { name, from, to, info.opening }
    end }
  for k, v in pairs(o or {}) do opts[k] = v end
  return breaker.new(opts)
end

local function dump(log)
  local t = {}
  for _, e in ipairs(log) do
    t[#t + 1] = table.concat(e, " ", 1, 3) .. " " .. tostring(e[4])
  end
  return table.concat(t, "; ")
end

local function transitions(log, from, to)
  local n = 0
  for _, e in ipairs(log) do
    if e[2] == from and e[3] == to then n = n + 1 end
  end
  return n
end

-- open it (failures = 1) and move to half-open: the setup of the
-- half-open scenarios
local function half_open(w, a)
  a:record(false)
  w.t = w.t + 1
  w.log = {}
end

describe("breaker races, every interleaving", function()
  it("two workers trip a closed breaker at once: one opening", function()
    local n = explore(function(w)
      local a = worker(w, "a", { failures = 2 })
      local b = worker(w, "b", { failures = 2 })
      return function() a:record(false) end,
        { function() a:record(false) end, function() b:record(false) end },
        function(log)
          assert.equal(1, #log)
          assert.same({ "closed", "open", 1 }, { log[1][2], log[1][3],
                                                 log[1][4] })
          local s, info = a:state()
          assert.equal("open", s)
          assert.equal(1, info.opening)
        end
    end)
    assert.is_true(n >= 20, n)
  end)

  it("two workers ask for one probe: one is admitted", function()
    local n = explore(function(w)
      local a = worker(w, "a", { failures = 1 })
      local b = worker(w, "b", { failures = 1 })
      local got = 0
      local function ask(br) if br:allow() then got = got + 1 end end
      return function() half_open(w, a) end, {
        function() ask(a) end, function() ask(b) end,
      }, function(log)
        assert.equal(1, got)
        assert.equal(1, #log)
      end
    end)
    assert.is_true(n >= 10, n)
  end)

  it("three workers ask for two probes: two are admitted, half-open "
     .. "is announced once (3,000 schedules drawn)", function()
    local n = explore(function(w)
      local ws = { worker(w, "a", { failures = 1, probes = 2 }),
                   worker(w, "b", { failures = 1, probes = 2 }),
                   worker(w, "c", { failures = 1, probes = 2 }) }
      local got = 0
      local bodies = {}
      for i = 1, 3 do
        bodies[i] = function() if ws[i]:allow() then got = got + 1 end end
      end
      return function() half_open(w, ws[1]) end, bodies, function(log)
        assert.equal(2, got)
        assert.equal(1, #log)
        assert.same({ "open", "half_open" }, { log[1][2], log[1][3] })
      end
    end, 3000)
    assert.equal(3000, n)
  end)

  it("a probe's success and another's failure (probes 2): it reopens; "
     .. "the success never closes it", function()
    local n = explore(function(w)
      local a = worker(w, "a", { failures = 1, probes = 2 })
      local b = worker(w, "b", { failures = 1, probes = 2 })
      local ta, tb
      return function()
        half_open(w, a)
        ta, tb = select(2, a:allow()), select(2, b:allow())
      end, {
        function() a:record(true, ta) end,
        function() b:record(false, tb) end,
      }, function(log)
        assert.equal(0, transitions(log, "half_open", "closed"))
        assert.equal(1, transitions(log, "half_open", "open"))
        local s, info = a:state()
        assert.equal("open", s)
        assert.equal(2, info.opening)
      end
    end)
    assert.is_true(n >= 20, n)
  end)

  -- probes 2: one success counted, the other probe lost; after
  -- probe_timeout two new probes: the one whose success would be the
  -- second races with the other's failure.  `first` is which of the two
  -- counted first on c<E> (the dict holds the sum right after each
  -- incr).
  local function last_success_race(w, first)
    local a = worker(w, "a", { failures = 1, probes = 2, probe_timeout = 5,
      half_open_timeout = 60 })
    local b = worker(w, "b", { failures = 1, probes = 2, probe_timeout = 5,
      half_open_timeout = 60 })
    local tc, td
    return a, function()
      half_open(w, a)
      local ta = select(2, a:allow())
      assert.is_not_nil(select(2, b:allow()))  -- lost
      a:record(true, ta)
      w.t = w.t + 5
      tc, td = select(2, a:allow()), select(2, b:allow())
      assert.is_true(tc ~= nil and td ~= nil)
      w.log = {}
      local after = w.dict.after
      w.dict.after = function(op, key)
        if op == "incr" and key:match("^api|c") and first[1] == nil then
          first[1] = w.dict.data[key] >= 2 ^ 32 and "failure" or "success"
        end
        return after(op, key)
      end
    end, {
      function() a:record(true, tc) end,   -- the second success
      function() b:record(false, td) end,  -- a failure
    }
  end

  it("the last success and a failure race: whichever is counted first "
     .. "decides, and a failure counted first is never undone", function()
    local outcomes = {}
    local n = explore(function(w)
      local first = {}
      local a, setup, bodies = last_success_race(w, first)
      return setup, bodies, function(log)
        local closed = transitions(log, "half_open", "closed")
        local reopened = transitions(log, "half_open", "open")
        assert.equal(1, closed + reopened)
        if first[1] == "failure" then
          assert.equal(1, reopened)
          assert.equal("open", (a:state()))
        else
          assert.equal(1, closed)
          -- the failure came after the close: ignored when it read the
          -- state before the close was written, else the first failure
          -- of the new closed period, which trips it (failures = 1).
          -- The two hooks may then be called in either order: each
          -- runs after its own write, and the other worker may run in
          -- between
          local tripped = transitions(log, "closed", "open")
          assert.is_true(tripped <= 1 and #log == 1 + tripped)
          outcomes["tripped" .. tripped] = true
        end
        outcomes[first[1]] = true
      end
    end)
    -- both orders happen, and each decided as above
    assert.is_true(outcomes.failure and outcomes.success
                   and outcomes.tripped0 and outcomes.tripped1)
    assert.is_true(n >= 20, n)
  end)

  it("two probes fail at once: one reopening, the next interval only",
    function()
      local n = explore(function(w)
        local a = worker(w, "a", { failures = 1, probes = 2 })
        local b = worker(w, "b", { failures = 1, probes = 2 })
        local ta, tb
        return function()
          half_open(w, a)
          ta, tb = select(2, a:allow()), select(2, b:allow())
        end, {
          function() a:record(false, ta) end,
          function() b:record(false, tb) end,
        }, function(log)
          assert.equal(1, transitions(log, "half_open", "open"))
          local _, info = a:state()
          assert.equal(2, info.opening)
          assert.equal(2, info.interval)
        end
      end)
      assert.is_true(n >= 20, n)
    end)

  it("two probes succeed at once: one closing", function()
    local n = explore(function(w)
      local a = worker(w, "a", { failures = 1, probes = 2 })
      local b = worker(w, "b", { failures = 1, probes = 2 })
      local ta, tb
      return function()
        half_open(w, a)
        ta, tb = select(2, a:allow()), select(2, b:allow())
        w.log = {}
      end, {
        function() a:record(true, ta) end,
        function() b:record(true, tb) end,
      }, function(log)
        assert.equal(1, transitions(log, "half_open", "closed"), dump(log))
        assert.equal(1, #log, dump(log))
        assert.equal("closed", (a:state()))
      end
    end)
    assert.is_true(n >= 10, n)
  end)

  it("a lost probe's late success and its successor's failure: one "
     .. "decision, never both", function()
    local outcomes = {}
    explore(function(w)
      local a = worker(w, "a", { failures = 2, probe_timeout = 5,
      half_open_timeout = 60 })
      local b = worker(w, "b", { failures = 2, probe_timeout = 5,
      half_open_timeout = 60 })
      local lost, next_
      return function()
        a:record(false)
        half_open(w, a)
        lost = select(2, a:allow())
        w.t = w.t + 5                  -- its slot expires
        next_ = select(2, b:allow())
        assert.is_not_nil(next_)
        w.log = {}
      end, {
        function() a:record(true, lost) end,
        function() b:record(false, next_) end,
      }, function(log)
        local closed = transitions(log, "half_open", "closed")
        local reopened = transitions(log, "half_open", "open")
        assert.equal(1, closed + reopened)
        outcomes[closed == 1 and "closed" or "open"] = true
        assert.equal(closed == 1 and "closed" or "open", (a:state()))
      end
    end)
    assert.is_true(outcomes.closed and outcomes.open)
  end)

  it("a probe and a trip of the next closed period do not mix", function()
    -- b's probe closes it while a, which allowed an attempt before the
    -- breaker opened, reports a failure: counted in the new closed
    -- period or ignored, never a second transition of the old one
    explore(function(w)
      local a = worker(w, "a", { failures = 1 })
      local b = worker(w, "b", { failures = 1 })
      local tb
      return function()
        half_open(w, a)
        tb = select(2, b:allow())
        w.log = {}
      end, {
        function() a:record(false) end,
        function() b:record(true, tb) end,
      }, function(log)
        assert.equal(1, transitions(log, "half_open", "closed"))
        assert.equal(0, transitions(log, "half_open", "open"))
        -- a's failure: ignored (counted while half-open) or the first
        -- of the new period, which trips it (failures = 1)
        assert.is_true(#log == 1 or #log == 2
          and transitions(log, "closed", "open") == 1, dump(log))
      end
    end)
  end)

  it("two workers find half-open silent past half_open_timeout while "
     .. "its probe reports late: one decision, never both", function()
    local outcomes = {}
    local n = explore(function(w)
      local o = { failures = 1, probe_timeout = 30, half_open_timeout = 5 }
      local a, b, c = worker(w, "a", o), worker(w, "b", o), worker(w, "c", o)
      local probe
      return function()
        half_open(w, a)
        probe = select(2, c:allow())
        assert.is_not_nil(probe)
        w.t = w.t + 5
        w.log = {}
      end, {
        function() a:allow() end,
        function() b:allow() end,
        function() c:record(true, probe, 5) end,
      }, function(log)
        local closed = transitions(log, "half_open", "closed")
        local reopened = transitions(log, "half_open", "open")
        assert.equal(1, closed + reopened, dump(log))
        outcomes[closed == 1 and "closed" or "open"] = true
        if reopened == 1 then
          local s, info = a:state()
          assert.equal("open", s)
          assert.equal(2, info.interval)        -- as after a hung probe
        end
      end
    end, 3000)
    assert.is_true(outcomes.closed and outcomes.open)
    assert.is_true(n >= 100, n)
  end)
end)
