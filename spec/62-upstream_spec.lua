-- backoff.upstream outside nginx: the declaration from a plain table
-- (defaults, every option checked with a message naming it), the peers
-- (each try to a peer the call has not tried and whose breaker allows
-- it, the bound max_ejected), the status and its JSON and HTML.  A
-- virtual clock and sleep: nothing here is timed.
local upstream = require "backoff.upstream"

local n = 0
local function name()
  n = n + 1
  return "spec" .. n
end

local function clocked()
  local t = { now = 0 }
  t.clock = function() return t.now end
  t.sleep = function(d) t.now = t.now + d end
  return t
end

local function raises(pattern, t)
  local ok, err = pcall(upstream.new, t)
  assert.is_false(ok)
  assert.truthy(tostring(err):find(pattern, 1, true), err)
end

local FOUR = { "10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80", "10.0.0.4:80" }

describe("backoff.upstream.new", function()
  it("takes the recommended setting for what is not said", function()
    local up = upstream.new { name = name() }
    local s = up:status()
    assert.equal("earned", s.budget.kind)
    assert.is_false(s.hedge)
    assert.equal("closed", s.peers[1].state)
    assert.equal(4, up.policy:config().max_attempts)
    assert.equal(up, upstream.get(s.name))
  end)

  it("refuses bad options, naming them", function()
    raises("unknown option 'retries'", { name = name(), retries = 3 })
    raises("unknown option 'max_ejectd' (did you mean 'max_ejected'?)",
      { name = name(), max_ejectd = 0.5 })
    raises("option 'name'", {})
    raises("option 'name'", { name = "a b" })
    raises("option 'peers'", { name = name(), peers = { "nohost" } })
    raises("option 'peers'", { name = name(), peers = {} })
    raises("option 'policy'", { name = name(), policy = { initial = 1 } })
    raises("option 'policy'", { name = name(),
      policy = { strategy = "exponential", initial_delay = -1 } })
    raises("option 'budget'", { name = name(), budget = "lots" })
    raises("option 'budget'", { name = name(), budget = { kind = "x" } })
    raises("option 'breaker'", { name = name(), breaker = { probes = 0 } })
    raises("option 'hedge'", { name = name(), hedge = { delay = 50e3 } })
    raises("option 'hedge'", { name = name(), hedge = { dealy = 0.1 } })
    -- a delay as long as the policy's deadline: at new, with the hint
    raises("'delay' is 20 s, not below the policy's deadline "
      .. "(max_actual_duration 10 s): no copy would ever be sent; times "
      .. "are seconds (0.02 for 20 ms)", { name = name(),
      hedge = { delay = 20 } })
    raises("option 'hedge': 'min_delay' is 50 s", { name = name(),
      hedge = { min_delay = 50 } })
    raises("option 'max_ejected'", { name = name(), max_ejected = 2 })
    raises("option 'metrics'", { name = name(), metrics = "yes" })
    local dup = name()
    upstream.new { name = dup }
    raises("declared already", { name = dup })
  end)

  it("builds the policy and the budget by name", function()
    local up = upstream.new { name = name(), policy = { strategy =
      "constant", delay = 0.1, max_attempts = 3 }, budget = "token_bucket" }
    assert.equal("constant", up.policy:config().strategy)
    assert.equal("token_bucket", up:status().budget.kind)
    local up2 = upstream.new { name = name(), policy = { strategy =
      "recommended", max_actual_duration = 3 }, budget = false,
      breaker = false }
    assert.equal(3, up2.policy:config().max_actual_duration)
    assert.is_false(up2:status().budget)
    assert.equal("none", up2:status().peers[1].state)
  end)
end)

describe("up:call with peers", function()
  it("sends each try of a call to a peer it has not tried", function()
    local c = clocked()
    local up = upstream.new { name = name(), peers = FOUR, clock = c.clock,
      budget = false, policy = { strategy = "constant", delay = 0.01,
        max_attempts = 4 } }
    local seen = {}
    local res, _, reason = up:call(function(_, _, peer)
      seen[#seen + 1] = peer
      return nil, "no"
    end, { sleep = c.sleep })
    assert.is_nil(res)
    assert.equal("max_attempts", reason)
    assert.equal(4, #seen)
    local set = {}
    for _, p in ipairs(seen) do set[p] = true end
    for _, p in ipairs(FOUR) do assert.truthy(set[p], p) end
  end)

  it("ejects a dead peer: only its probes reach it", function()
    local c = clocked()
    local up = upstream.new { name = name(), peers = FOUR, clock = c.clock }
    local hits = {}
    for _ = 1, 400 do
      local res = up:call(function(_, _, peer)
        hits[peer] = (hits[peer] or 0) + 1
        if peer == FOUR[1] then return nil, "refused" end
        return "ok"
      end, { sleep = c.sleep })
      assert.equal("ok", res)
      c.now = c.now + 0.01
    end
    local s = up:status()
    assert.are_not.equal("closed", s.peers[1].state)
    assert.equal(1, s.ejected)
    -- 5 failures open it; then one probe per open interval (0.4-1.2 s)
    -- over the 4 virtual seconds
    assert.truthy(hits[FOUR[1]] <= 5 + 10, hits[FOUR[1]])
    assert.truthy(hits[FOUR[2]] > 100)
    assert.truthy(#s.transitions > 0)
    assert.equal(FOUR[1], s.transitions[1].peer)
  end)

  it("never ejects more than max_ejected of the peers", function()
    local c = clocked()
    local up = upstream.new { name = name(), peers = FOUR, clock = c.clock,
      max_ejected = 0.5, budget = false }
    local hits = {}
    for _ = 1, 400 do
      up:call(function(_, _, peer)
        hits[peer] = (hits[peer] or 0) + 1
        if peer ~= FOUR[4] then return nil, "refused" end
        return "ok"
      end, { sleep = c.sleep })
      c.now = c.now + 0.001
    end
    local s = up:status()
    -- 3 breakers open, but only 2 peers kept out: the third is tried
    assert.equal(2, s.ejected)
    assert.equal(2, s.max_ejected)
    local allowed = 0
    for _, p in ipairs(s.peers) do
      if p.treated_as_allowed then allowed = allowed + 1 end
    end
    assert.equal(1, allowed)
    -- the peer treated as allowed still takes tries
    local most = 0
    for i = 1, 3 do most = math.max(most, hits[FOUR[i]] or 0) end
    assert.truthy(most > 50, most)
  end)

  it("calls up:request's do_request as hedge.request does", function()
    local up = upstream.new { name = name(), peers = FOUR, budget = false }
    local seen = {}
    local res = up:request(function(attempt, t, cancel, peer)
      local sock = { close = function() end }
      assert.equal(sock, cancel:on_cancel(sock))   -- never cancelled
      assert.is_false(cancel.cancelled)
      seen[#seen + 1] = { attempt, type(t), peer.name, peer.host,
        peer.port, peer[1], peer[2] }
      if attempt == 1 then return 503 end
      return { status = 200 }
    end, { method = "GET", sleep = function() end })
    assert.equal(200, res.status)
    assert.equal(2, #seen)
    for i, s in ipairs(seen) do
      assert.equal(i, s[1])
      assert.equal("table", s[2])
      assert.equal(s[4] .. ":" .. s[5], s[3])
      assert.equal(s[4], s[6])
      assert.equal(s[5], s[7])
    end
    assert.are_not.equal(seen[1][3], seen[2][3])   -- another peer
  end)

  it("takes a peers function", function()
    local up = upstream.new { name = name(), peers = function()
      return { "10.0.0.9:81" } end }
    local got
    assert.equal("ok", up:call(function(_, _, peer)
      got = peer
      return "ok"
    end))
    assert.equal("10.0.0.9:81", got)
  end)
end)

describe("status", function()
  it("writes JSON and an HTML page of every upstream", function()
    local up = upstream.new { name = name(), peers = { "[::1]:8080" } }
    local json = upstream.status_json()
    assert.truthy(json:find('"upstreams":[', 1, true))
    assert.truthy(json:find('"peer":"[::1]:8080"', 1, true))
    assert.truthy(json:find('"transitions":[]', 1, true))
    local page = upstream.status_page()
    assert.truthy(page:find("<h2>" .. up.name .. "</h2>", 1, true))
    assert.truthy(page:find('data-peer="[::1]:8080"', 1, true))
  end)

  it("encodes JSON", function()
    local j = upstream.json
    assert.equal('{"a":[1,2.5,"x\\"y\\n"],"b":false,"c":{}}',
      j { a = { 1, 2.5, 'x"y\n' }, b = false, c = {} })
    assert.equal('"\\u0001"', j("\1"))
    -- a time of day keeps its milliseconds (not 1.79593e+09)
    assert.equal("[1795928424.123,0.1]",
      require("backoff.upstream.status").encode_own {
        1795928424.123, 0.1 })
  end)

  it("shows transitions as clock times and the peers over the bound",
    function()
    local c = { now = 1795928424.25 }
    local up = upstream.new { name = name(), peers = FOUR,
      clock = function() return c.now end, max_ejected = 0.25,
      budget = false }
    for _ = 1, 200 do
      up:call(function(_, _, peer)
        if peer ~= FOUR[4] then return nil, "refused" end
        return "ok"
      end, { sleep = function(d) c.now = c.now + d end })
      c.now = c.now + 0.001
    end
    local page = upstream.status_page()
    local section = page:match('<section id="up%-' .. up.name
      .. '">.-</section>')
    assert.truthy(section:find("%d%d:%d%d:%d%d%.%d%d%dZ %S+: %l"),
      section)
    assert.truthy(section:find("over the ejection bound", 1, true),
      section)
    assert.truthy(section:find("reopens in", 1, true))
  end)
end)
