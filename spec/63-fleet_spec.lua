-- backoff.fleet without nginx: the real Redis script run on a fake
-- Redis (spec/fleet_fake_redis.lua), four hosts, each with its own
-- dict, breaker and fleet object, on one virtual clock.  The real
-- Redis, real nginx and the faults are spec/nginx/fleet_redis.lua.
local backoff = require "backoff"
local fleet = require "backoff.fleet"
local view = require "backoff.fleet.view"
local script = require "backoff.fleet.script"
local fredis = require "backoff.fleet.redis"
local store = require "backoff.store"

local T = 100
local function clock() return T end
local new_fake = dofile("spec/fleet_fake_redis.lua")

-- n hosts on one fake Redis; each: dict, breaker (3 failures in a row,
-- open 2 s), fleet, guard
local function hosts(n, o)
  o = o or {}
  local R = new_fake(clock)
  local list = {}
  for i = 1, n do
    local h = {}
    h.dict = store.dict(nil, clock)
    h.br = backoff.breaker.new { failures = o.failures or 3, clock = clock,
      policy = backoff.constant { delay = 2, jitter = "none" } }
    h.fl = fleet.new { shared = false, host = "h" .. i, clock = clock,
      client = R.client, quorum = o.quorum, tenure = o.tenure,
      suspect = o.suspect, max_open = o.max_open }
    h.fl.dict = h.dict
    h.g = h.fl:breaker(h.br)
    list[i] = h
  end
  return list, R
end

local function sync_all(list)
  for _, h in ipairs(list) do assert(h.fl:sync()) end
end

-- time passes, every host syncing once a second (as their timers do)
local function advance(list, s)
  for _ = 1, s * 2 do
    T = T + 0.5
    sync_all(list)
  end
end

local function fail3(h)
  for _ = 1, 3 do
    local ok, t = h.g:allow()
    assert(ok)
    h.g:record(false, t)
  end
end

describe("backoff.fleet", function()
  before_each(function() T = 100 end)

  it("checks its options, and never shows the password", function()
    assert.has_error(function()
      fleet.new { shared = false, interval = 0 } end,
      "backoff.fleet: option 'interval' must be a number >= 0.1 and "
      .. "<= 60 (got 0)")
    assert.has_error(function()
      fleet.new { shared = false, redis = { port = 0 } } end)
    assert.has_error(function() fleet.new { shared = false, nope = 1 } end,
      "backoff.fleet: unknown option 'nope'")
    assert.has_error(function()
      fleet.new { shared = false, interval = 1, open_interval = 2 } end,
      "backoff.fleet: option 'open_interval' must be <= 'interval' (got "
      .. "2 > 1)")
    local f2 = fleet.new { shared = false, host = "a", interval = 2 }
    assert.equal(0.5, f2.open_interval)
    assert.equal(2, f2:period())           -- no breaker open: interval
    local fl = fleet.new { shared = false, host = "a", redis = {
      host = "r1", port = 6380, database = 2, username = "gw",
      password = "s3cret" } }
    assert.equal("backoff.fleet: 'a' -> gw@r1:6380/2", tostring(fl))
    assert.is_nil(tostring(fl):find("s3cret"))
  end)

  it("one host open on its own evidence: it refuses, the others do not",
     function()
    local list = hosts(4)
    sync_all(list)
    fail3(list[1])
    sync_all(list)
    assert.is_false((list[1].g:allow()))
    for i = 2, 4 do assert.is_true((list[i].g:allow())) end
    assert.is_false(list[2].fl:refuses("backoff:breaker"))
    local st = list[2].fl:status()
    assert.equal(4, st.hosts)
    assert.same({ open = false, probe = false, votes = 1, suspects = 0,
                  need = 2 },
                st.breakers["backoff:breaker"])
  end)

  it("opens by quorum: hosts that saw no failure refuse after one sync",
     function()
    local list = hosts(4)
    sync_all(list)
    fail3(list[1]) fail3(list[2])
    -- before a sync, hosts 3 and 4 still allow
    assert.is_true((list[3].g:allow()))
    sync_all(list)
    for i = 1, 4 do assert.is_false((list[i].g:allow()), "host " .. i) end
    assert.is_true(list[3].fl:refuses("backoff:breaker"))
    assert.equal(0.25, list[3].fl:period())  -- open: open_interval
    assert.is_false(list[3].g:allows())
    local _, info = list[3].g:state()
    assert.equal("open", info.fleet)
    -- no prober before a host has demand (a request refused); then one
    local probers = 0
    for i = 1, 4 do
      if list[i].g.last.probe then probers = probers + 1 end
    end
    assert.equal(0, probers)
    sync_all(list)
    for i = 1, 4 do
      if list[i].g.last.probe then probers = probers + 1 end
    end
    assert.equal(1, probers)
  end)

  it("one host probes for the fleet, and its success closes the fleet",
     function()
    local list = hosts(4)
    sync_all(list)
    fail3(list[1]) fail3(list[2])
    sync_all(list)
    for i = 1, 4 do assert.is_false((list[i].g:allow())) end  -- demand
    sync_all(list)
    local p, q = list[1], list[2]       -- a host with demand
    if not p.g.last.probe then p, q = q, p end
    assert.is_true(p.g.last.probe)
    advance(list, 2.5)                  -- both half-open on their own
    assert.is_false((q.g:allow()))      -- not the prober: no probe
    for i = 3, 4 do assert.is_false((list[i].g:allow())) end
    local ok, ticket = p.g:allow()
    assert.is_true(ok)
    assert.equal("table", type(ticket))  -- the breaker's own probe
    p.g:record(true, ticket)
    assert.equal("closed", (p.br:state()))
    sync_all(list)                      -- the prober closes the fleet
    for i = 3, 4 do assert.is_true((list[i].g:allow())) end
    T = T + 0.25
    sync_all(list)                      -- within one open_interval
    ok, ticket = q.g:allow()            -- q probes on its own now
    assert.is_true(ok)
    q.g:record(true, ticket)
    advance(list, 4)                    -- no vote is left
    for i = 1, 4 do assert.is_true((list[i].g:allow())) end
  end)

  it("a failed fleet probe keeps it open; the next tenure elects again",
     function()
    local list = hosts(4, { tenure = 3 })
    sync_all(list)
    fail3(list[1]) fail3(list[2]) fail3(list[3])
    sync_all(list)
    local probes = 0
    for s = 1, 120 do                   -- 30 s of a dead upstream
      T = T + 0.25
      sync_all(list)                    -- open: every open_interval
      local now = 0
      for i = 1, s % 4 == 0 and 4 or 0 do   -- a request a second
        local ok, t = list[i].g:allow()
        if ok then
          probes, now = probes + 1, now + 1
          list[i].g:record(false, t)
        end
      end
      assert.is_true(now <= 1)          -- one prober at a time
    end
    -- each host alone: 3 voters x 30 s / 2 s = 45 probes; the fleet:
    -- one prober at a time, at most one probe per probe_every (the
    -- role stays with a host that probes and has demand)
    assert.is_true(probes >= 10 and probes <= 30, probes)
    assert.is_false((list[4].g:allow()))
  end)

  it("a vote needs fresh evidence: hosts whose breakers opened and then "
     .. "got no traffic stop voting, and cannot reopen the fleet",
     function()
    local list, R = hosts(4)
    sync_all(list)
    fail3(list[1]) fail3(list[2])
    sync_all(list)
    assert.equal(2, list[3].g.last.votes)
    assert.is_true(list[3].g.last.open)
    -- hosts 1 and 2 get no request from now on; hosts 3 and 4 do
    local p
    for _ = 1, 16 do                    -- 4 s: open_interval syncs
      T = T + 0.25
      sync_all(list)
      for i = 3, 4 do
        local ok, t = list[i].g:allow()
        if ok then p = list[i] list[i].g:record(false, t) end
      end
    end
    assert.is_truthy(p)                 -- a host with demand probes
    advance(list, 8)                    -- 12 s after the last failure
    -- the prober may vote (its probes fail: fresh); hosts 1, 2 do not
    local function voters()
      local who = {}
      for k, v in pairs(R.data) do
        if k:find(":v:", 1, true) and R.pexp[k] > T * 1000 then
          for m in pairs(v) do who[m] = true end
        end
      end
      return who
    end
    assert.is_nil(voters().h1)
    assert.is_nil(voters().h2)
    assert.is_true(list[3].g.last.open) -- open: max_open, not the votes
    assert.equal("half_open", (list[1].br:state()))  -- stale, no vote
    -- the upstream is back: the prober's success closes the fleet
    local ok, t
    for _ = 1, 8 do
      T = T + 0.25
      sync_all(list)
      ok, t = p.g:allow()
      if ok then break end
    end
    assert.is_true(ok)
    p.g:record(true, t)
    sync_all(list)
    -- long past the close's marker (cttl): hosts 1 and 2 still idle,
    -- their breakers still not closed, and no vote reopens the fleet
    advance(list, 30)
    for i = 3, 4 do assert.is_true((list[i].g:allow()), i) end
    assert.same({}, voters())
    assert.is_false(list[3].g.last.open)
    assert.is_not.equal("closed", (list[1].br:state()))
  end)

  it("an idle prober (no demand, no probe in its tenure) is not elected "
     .. "again; a host with requests takes the role and probes",
     function()
    local list = hosts(4, { tenure = 3 })
    sync_all(list)
    fail3(list[1]) fail3(list[2])
    sync_all(list)
    sync_all(list)                        -- every host hears of it
    assert.is_false((list[1].g:allow()))  -- host 1's one request
    T = T + 0.25
    sync_all(list)
    assert.is_true(list[1].g.last.probe)  -- the only host with demand
    -- host 1 gets no request again; host 3 one a second
    local probed, held = 0, 0
    for s = 1, 80 do                      -- 20 s
      T = T + 0.25
      sync_all(list)
      if list[1].g.last.probe then held = held + 1 end
      if s % 4 == 0 then
        local ok, t = list[3].g:allow()
        if ok then
          probed = probed + 1
          list[3].g:record(false, t)
        end
      end
    end
    -- host 1 held the role for its one tenure (3 s: 12 syncs) at most
    assert.is_true(held <= 12, held)
    assert.is_true(probed >= 8, probed)   -- about one probe a second
    assert.is_true(list[3].g.last.probe)
    assert.is_false(list[1].g.last.probe)
  end)

  it("quiet hosts: suspects (3 failures in a row) open it by half the "
     .. "fleet; the prober, closed, probes once per probe_every",
     function()
    local list = hosts(20, { failures = 30 })
    sync_all(list)
    local function fail(h)
      local ok, t = h.g:allow()
      assert(ok)
      h.g:record(false, t)
    end
    for i = 1, 9 do for _ = 1, 3 do fail(list[i]) end end
    sync_all(list)
    assert.is_true((list[20].g:allow()))       -- 9 < 10 suspects
    assert.equal(9, list[20].g.last.suspects)
    for _ = 1, 3 do fail(list[10]) end
    sync_all(list)
    for i = 11, 20 do assert.is_false((list[i].g:allow())) end
    sync_all(list)                             -- 11-20 had demand
    local p
    for i = 1, 20 do if list[i].g.last.probe then p = list[i] end end
    assert.is_truthy(p)
    assert.equal("closed", (p.br:state()))     -- its own breaker: closed
    local ok, t = p.g:allow()                  -- the fleet's probe
    assert.is_true(ok)
    assert.is_false((p.g:allow()))             -- one per second
    p.g:record(false, t)
    -- the votes lapse (suspect_window), the fleet stays open (max_open)
    advance(list, 12)
    assert.is_false((list[20].g:allow()))
    assert.equal(0, list[20].g.last.suspects)
    -- the prober's success closes it (a host with demand probes)
    for i = 1, 20 do assert.is_false((list[i].g:allow())) end
    for _ = 1, 3 do
      for i = 1, 20 do
        if list[i].g.last.probe then p = list[i] end
      end
      ok, t = p.g:allow()
      if ok then break end
      advance(list, 1)
    end
    assert.is_true(ok)
    p.g:record(true, t)
    sync_all(list)
    sync_all(list)
    for i = 1, 20 do assert.is_true((list[i].g:allow()), i) end
  end)

  it("stays open at most max_open without a success; suspect = 0 "
     .. "counts no suspect", function()
    local list = hosts(20, { max_open = 5, failures = 30 })
    sync_all(list)
    for i = 1, 10 do
      for _ = 1, 3 do
        local ok, t = list[i].g:allow()
        assert(ok)
        list[i].g:record(false, t)
      end
    end
    sync_all(list)
    assert.is_false((list[20].g:allow()))
    advance(list, 12)                          -- suspects gone, 5 s over
    assert.is_true((list[20].g:allow()))
    local quiet = hosts(20, { suspect = 0, failures = 30 })
    sync_all(quiet)
    for i = 1, 20 do
      for _ = 1, 3 do
        local ok, t = quiet[i].g:allow()
        assert(ok)
        quiet[i].g:record(false, t)
      end
    end
    sync_all(quiet)
    assert.is_true((quiet[1].g:allow()))
  end)

  it("the guard holds what its breaker holds", function()
    local fl = fleet.new { shared = false, host = "a" }
    local rec = fl:breaker(backoff.breaker.recommended { clock = clock })
    assert.equal(rec:breaker():hold(), rec:hold())
    assert.equal(0, fl:breaker({ state = function() return "closed", {} end,
      key = function() return "duck" end }):hold())
  end)

  it("a quorum given in hosts", function()
    local list = hosts(4, { quorum = 3 })
    sync_all(list)
    fail3(list[1]) fail3(list[2])
    sync_all(list)
    assert.is_true((list[4].g:allow()))
    fail3(list[3])
    sync_all(list)
    assert.is_false((list[4].g:allow()))
  end)

  it("Redis down: each host on its own state at once; back by itself",
     function()
    local list, R = hosts(4)
    sync_all(list)
    fail3(list[1]) fail3(list[2])
    sync_all(list)
    assert.is_false((list[4].g:allow()))
    R.down = "connection refused"
    for _, h in ipairs(list) do
      local ok, err = h.fl:sync()
      assert.is_nil(ok)
      assert.equal("connection refused", err)
    end
    assert.is_true((list[4].g:allow()))     -- its own state: closed
    assert.is_false((list[1].g:allow()))    -- its own state: open
    R.down = nil
    sync_all(list)
    assert.is_false((list[3].g:allow()))
    -- host 4 was refused by the fleet within the interval: its prober
    assert.is_true(list[4].g.last.probe)
  end)

  it("a timer that stops syncing: the view expires by itself", function()
    local list = hosts(4)
    sync_all(list)
    fail3(list[1]) fail3(list[2])
    sync_all(list)
    assert.is_false((list[4].g:allow()))
    T = T + 3.01                            -- 3 intervals
    assert.is_true((list[4].g:allow()))
  end)

  it("Redis restarted empty: votes come back in one sync", function()
    local list, R = hosts(4)
    sync_all(list)
    fail3(list[1]) fail3(list[2])
    sync_all(list)
    R.flush()
    sync_all(list)
    assert.is_false((list[4].g:allow()))
    assert.equal(4, list[4].fl:status().hosts)
  end)

  it("foreign values in Redis: deleted, ignored, never a refusal",
     function()
    local list, R = hosts(4)
    sync_all(list)
    local b = math.floor(T * 1000 / 1000)
    local pre = "backoff:fleet:b:backoff:breaker:"
    R.data[pre .. "v:" .. b] = "poison"          -- a string for a set
    R.data["backoff:fleet:h:" .. b] = { x = true, y = true }  -- no expiry
    R.data[pre .. "p"] = "h9"                    -- a prober for good
    local fake_votes = {}
    for i = 1, 50 do fake_votes["evil" .. i] = true end
    R.data[pre .. "v:" .. (b - 1)] = fake_votes  -- no expiry
    sync_all(list)
    for i = 1, 4 do assert.is_true((list[i].g:allow())) end
    assert.is_nil(R.data[pre .. "p"])
    assert.is_nil(R.data[pre .. "v:" .. (b - 1)])
    -- and the fleet works on
    fail3(list[1]) fail3(list[2])
    sync_all(list)
    assert.is_false((list[4].g:allow()))
  end)

  it("a reply that is not the script's is an error: own state", function()
    local list = hosts(2)
    for _, bad in ipairs({ "OK", { 0 }, { 2, 1, 1, 9, 1 }, { 2, 1 } }) do
      list[1].fl.client = function()
        return { eval = function() return bad end, done = function() end,
                 close = function() end }
      end
      list[1].dict:set(list[1].g.fk, T + 1, 3)
      local ok, err = list[1].fl:sync()
      assert.is_nil(ok)
      assert.equal("not the script's reply", err)
      assert.is_nil(list[1].dict:get(list[1].g.fk))
    end
  end)

  it("the view: foreign values in the host's dict are missing", function()
    local d = store.dict(nil, clock)
    for _, v in ipairs({ "open", T + 1000, -(T + 1000), 0 / 0, true }) do
      d:set("k|Fb", v)
      assert.is_nil(view.read(d, "k|Fb", T, 3))
      assert.is_false(view.refuses(d, "k|Fb", T, 3))
    end
    d:set("k|Fb", T + 2)
    assert.equal("open", view.read(d, "k|Fb", T, 3))
    d:set("k|Fb", -(T + 2))
    assert.equal("probe", view.read(d, "k|Fb", T, 3))
    assert.equal("k|Fb", view.key("k", "b"))
  end)

  it("the client refuses to talk outside a timer", function()
    local fake_ngx = { get_phase = function() return "content" end }
    local c, err = fredis.connect({ host = "127.0.0.1", port = 1,
                                    timeout = 0.1 }, fake_ngx)
    assert.is_nil(c)
    assert.equal("no Redis call in the content phase", err)
  end)

  it("RESP: the encoding and the replies", function()
    assert.equal("*2\r\n$3\r\nGET\r\n$1\r\nk\r\n", fredis.encode { "GET", "k" })
    local function sock(text)
      local pos = 1
      return { receive = function(_, n)
        if n == "*l" then
          local e = text:find("\r\n", pos, true)
          local line = text:sub(pos, e - 1)
          pos = e + 2
          return line
        end
        local s = text:sub(pos, pos + n - 1)
        pos = pos + n
        return s
      end }
    end
    assert.same({ 1, "ab", false, { err = "ERR x" } },
      fredis.read(sock("*4\r\n:1\r\n$2\r\nab\r\n$-1\r\n-ERR x\r\n")))
    assert.equal("OK", fredis.read(sock("+OK\r\n")))
    local v, err = fredis.read(sock("-NOSCRIPT no\r\n"))
    assert.is_nil(v)
    assert.equal("-NOSCRIPT no", err)
  end)

  it("the script's arguments", function()
    local a = script.args({ prefix = "p:", host = "h", interval = 1,
      tenure = 5, share = 0.25, min = 2, sshare = 0.5, mins = 10,
      max_open = 60, cttl = 10 },
      { { name = "b", state = "o", res = "1" } },
      { { name = "api", retries = 3, saved = 2 } })
    assert.same({ 0, "p:", "h", 1000, 5000, 0.25, 2, 0.5, 10, 60000,
                  10000, 1, "b", "o", "1", "0", "api", 3, 2 }, a)
  end)
end)

-- budgets that see the fleet (fl:budget): n hosts on one fake Redis,
-- each a dict, a shared recommended budget and a fleet
local function budget_hosts(n, o)
  local R = new_fake(clock)
  local list = {}
  for i = 1, n do
    local h = { dict = store.dict(nil, clock) }
    h.fl = fleet.new { shared = false, host = "h" .. i, clock = clock,
      client = R.client }
    h.fl.dict = h.dict
    h.bud = backoff.budget.recommended { shared = h.dict, key = "api",
                                         clock = clock }
    h.g = h.fl:budget(h.bud, o)
    list[i] = h
  end
  return list, R
end

-- a host's request that failed once and then succeeded on its retry
local function saved(h)
  h.g:record(false, 1)
  assert.is_true(h.g:withdraw(nil, 2))
  h.g:record(true, 2)
end

-- spend what the host's own budget allows: the retries it refuses next
local function drain(h)
  local n = 0
  while h.bud:withdraw(nil, 3) do n = n + 1 end
  return n
end

describe("backoff.fleet budgets", function()
  before_each(function() T = 100 end)

  it("checks its arguments", function()
    local fl = fleet.new { shared = false, host = "a", clock = clock }
    assert.has_error(function() fl:budget({}) end,
      "backoff.fleet:budget: a budget expected (got table)")
    local bud = backoff.budget.recommended { clock = clock }
    assert.has_error(function() fl:budget(bud) end,
      "backoff.fleet:budget: option 'key' must be given (a string "
      .. "without spaces: the budget's name in Redis' keys) for a budget "
      .. "without a shared key")
    assert.has_error(function() fl:budget(bud, { key = "a", lend = -1 }) end,
      "backoff.fleet:budget: option 'lend' must be a number >= 0 and "
      .. "<= 1048576 (got -1)")
    assert.has_error(function() fl:budget(bud, { key = "a", x = 1 }) end,
      "backoff.fleet:budget: unknown option 'x'")
    local g = fl:budget(bud, { key = "a" })
    -- the budget's own methods pass through
    assert.equal(bud:capacity(), g:capacity())
    assert.equal(bud:cost(), g:cost())
    assert.equal(bud, g:budget())
  end)

  it("the level: nothing without saved retries, or when they mostly "
     .. "fail", function()
    local grant = require "backoff.fleet.grant"
    assert.equal(0, grant.level(32, 8, 0, 0, 10))
    assert.equal(0, grant.level(32, 8, 100, 0, 10))     -- dead upstream
    assert.equal(0, grant.level(32, 8, 100, 20, 10))    -- 80% failing
    assert.equal(8, grant.level(32, 8, 100, 50, 10))    -- capped
    assert.equal(3.2, grant.level(32, 8, 10, 5, 50))    -- 32 x 5 / 50
    assert.near(4, grant.level(32, 8, 100, 30, 10), 1e-9) -- half weight
  end)

  it("a host whose own budget is spent retries on the fleet's grant, "
     .. "with no Redis call in its decisions", function()
    local list, R = budget_hosts(4)
    for _, h in ipairs(list) do assert(h.fl:sync()) end
    -- hosts 1-3 see retries succeed; host 4 has seen nothing yet
    for i = 1, 3 do saved(list[i]) saved(list[i]) end
    local h4 = list[4]
    drain(h4)
    assert.is_false(h4.g:withdraw(nil, 3))         -- no grant yet
    T = T + 1
    for _, h in ipairs(list) do assert(h.fl:sync()) end
    -- 6 retries, all saved, 4 hosts: 32 x 6 / 4 = 48, at most 8
    assert.equal(8, h4.g:grant())
    local calls = R.calls
    local n = 0
    while h4.g:withdraw(nil, 3) do n = n + 1 end
    assert.equal(8, n)
    assert.equal(calls, R.calls)
    assert.equal(0, h4.g:grant())
    assert.is_false(h4.g:allows(nil, 3))
    -- a retry after an overload answer is never paid from the grant
    local big = budget_hosts(1, { capacity = 100 })[1]
    big.dict:set("backoff:fleet|Gapi", 50000)
    drain(big)
    assert.is_false(big.g:withdraw(big.bud:throttle_cost(), 3))
    assert.is_false(big.g:allows(big.bud:throttle_cost(), 3))
    assert.is_true(big.g:withdraw(2, 3))
    assert.equal(48, big.g:grant())
    local st = h4.fl:status()
    assert.same({ retries = 6, saved = 6, hosts = 4, grant = 0, lent = 8 },
                st.budgets.api)
  end)

  it("goes where a budget goes: backoff.retry pays from the grant",
     function()
    local list = budget_hosts(2)
    local function run(h)
      local n = 0
      local res, _, reason = backoff.retry(backoff.constant { delay = 0,
        max_attempts = 5 }, function()
          n = n + 1
          if n < 4 then return nil, "fail" end
          return "ok"
        end, { budget = h.g, sleep = function() end })
      return res, reason, n
    end
    drain(list[1])
    local res, reason, n = run(list[1])
    assert.is_nil(res)
    assert.equal("budget", reason)
    assert.equal(1, n)
    -- host 2 sees retries saved; host 1 then gets the grant
    for _, h in ipairs(list) do assert(h.fl:sync()) end
    saved(list[2]) saved(list[2])
    T = T + 1
    assert(list[2].fl:sync())                    -- pushes first
    assert(list[1].fl:sync())
    res, reason, n = run(list[1])
    assert.is_nil(reason)
    assert.equal("ok", res)
    assert.equal(4, n)
    assert.equal(3, list[1].g.lent)
  end)

  it("a dead upstream lends nothing: each host on its own budget",
     function()
    local list = budget_hosts(4)
    for _ = 1, 3 do
      for _, h in ipairs(list) do
        h.g:record(false, 1)
        h.g:withdraw(nil, 2)
        h.g:record(false, 2)
        assert(h.fl:sync())
      end
      T = T + 1
    end
    for _, h in ipairs(list) do
      assert.equal(0, h.g:grant())
      drain(h)
      assert.is_false(h.g:withdraw(nil, 3))    -- nothing but its own
      assert.is_false(h.g:allows(nil, 3))
    end
  end)

  it("Redis down: the grant is deleted, one warn per interval",
     function()
    local list, R = budget_hosts(2)
    for _, h in ipairs(list) do assert(h.fl:sync()) end
    saved(list[1]) saved(list[2])
    T = T + 1
    for _, h in ipairs(list) do assert(h.fl:sync()) end
    assert.is_true(list[1].g:grant() > 0)
    local logged = {}
    local old = store.log
    store.log = function(...) logged[#logged + 1] = table.concat({ ... }) end
    R.down = "connection refused"
    local ok, err = list[1].fl:sync()
    local ok2 = list[1].fl:sync()
    store.log = old
    assert.is_nil(ok) assert.is_nil(ok2)
    assert.equal("connection refused", err)
    assert.equal(0, list[1].g:grant())
    assert.equal(1, #logged)
    -- Redis back: the host lends again as the fleet sees retries saved
    R.down = nil
    saved(list[1])
    T = T + 1
    assert(list[1].fl:sync())
    assert.is_true(list[1].g:grant() > 0)
  end)

  it("the grant expires by itself when the timer stops", function()
    local list = budget_hosts(2)
    for _, h in ipairs(list) do assert(h.fl:sync()) end
    saved(list[1])
    T = T + 1
    assert(list[1].fl:sync())
    assert.is_true(list[1].g:grant() > 0)
    T = T + 3.01                                   -- 3 intervals
    assert.equal(0, list[1].g:grant())
  end)

  it("foreign values: in Redis deleted and named, in the dict ignored",
     function()
    local list, R = budget_hosts(2)
    for _, h in ipairs(list) do assert(h.fl:sync()) end
    local b = math.floor(T * 1000 / 1000)
    local k = "backoff:fleet:g:api:y:" .. b
    R.data[k], R.pexp[k] = "lots", math.floor(T * 1000) + 3000
    local logged = {}
    local old = store.log
    store.log = function(...) logged[#logged + 1] = table.concat({ ... }) end
    assert(list[1].fl:sync())
    list[1].dict:set("backoff:fleet|Gapi", "x")
    local g = list[1].g:grant()
    store.log = old
    assert.is_nil(R.data[k])
    assert.equal(0, g)
    assert.is_truthy(table.concat(logged, "\n"):find(k, 1, true))
    assert.is_nil(list[1].dict:get("backoff:fleet|Gapi"))
    -- a plausible grant but far too large: refused as foreign too
    list[1].dict:set("backoff:fleet|Gapi", 1e9)
    assert.equal(0, list[1].g:grant())
  end)

  it("one budget per name is synced: the workers' objects share it",
     function()
    local R = new_fake(clock)
    local d = store.dict(nil, clock)
    local fl = fleet.new { shared = false, host = "h", clock = clock,
                           client = R.client }
    fl.dict = d
    local a = fl:budget(backoff.budget.recommended { shared = d,
      key = "api", clock = clock })
    local b = fl:budget(backoff.budget.recommended { shared = d,
      key = "api", clock = clock })
    assert.equal(1, #fl.buds)
    a:record(false, 1) a:record(true, 2)
    b:record(false, 1) b:record(true, 2)
    assert(fl:sync())
    T = T + 1
    assert(fl:sync())
    assert.equal(2, fl:status().budgets.api.retries)
    assert.equal(a:grant(), b:grant())
    assert.is_true(a:grant() > 0)
  end)
end)
