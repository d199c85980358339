-- backoff.hedge's cheap paths, against the fake ngx of
-- spec/fake_ngx_threads.lua: the request waits on a semaphore its
-- copies post (no sleeper thread; the semaphores pooled and drained),
-- and runs its first copy in its own coroutine when the pace already
-- refuses a hedge.  The real nginx side is spec/nginx/hedge.lua.
local backoff = require "backoff"
local hedge = require "backoff.hedge"

local root = (debug.getinfo(1, "S").source:match("^@(.-)[^/]*$") or "./")
local new_fake = dofile(root .. "fake_ngx_threads.lua")

local function pack(...) return { n = select("#", ...), ... } end

-- do_request answering copy a after script[a][1] seconds with
-- script[a][2] (a list of results); the last entry repeats
local function upstream(fake, script)
  local u = { log = {}, starts = {}, calls = 0 }
  u.fn = function(attempt, _, cancel)
    u.calls = u.calls + 1
    u.starts[attempt] = fake.t
    u.log[#u.log + 1] = "start " .. attempt
    cancel:on_cancel(function() u.log[#u.log + 1] = "close " .. attempt end)
    local s = script[attempt] or script[#script]
    fake.sleep(s[1])
    u.log[#u.log + 1] = "read " .. attempt
    return (table.unpack or unpack)(s[2])
  end
  return u
end

describe("backoff.hedge, cheap paths", function()
  local saved, fake, p
  before_each(function()
    saved = rawget(_G, "ngx")
    fake = new_fake()
    rawset(_G, "ngx", fake)
    package.loaded["ngx.semaphore"] = fake.semaphore
    p = backoff.constant { delay = 0, max_attempts = 3, clock = fake.clock }
  end)
  after_each(function()
    rawset(_G, "ngx", saved)
    package.loaded["ngx.semaphore"] = nil
  end)

  local function opts(t)
    local o = { method = "GET", delay = 0.05, budget = false, pace = false }
    for k, v in pairs(t or {}) do o[k] = v end
    return o
  end

  it("waits on a semaphore: one thread per copy, no sleeper", function()
    local u = upstream(fake, { { 0.01, { 200 } } })
    assert.equal(200, hedge.request(p, u.fn, opts()))
    assert.equal(1, fake.spawned)
    assert.equal(1, fake.semaphores)
    assert.near(1000.01, fake.t, 1e-9)
    -- a slow first copy: the hedge starts at the delay, wins, the first
    -- is cancelled; the semaphore is the pooled one
    u = upstream(fake, { { 1, { 500 } }, { 0.01, { 201 } } })
    local t0 = fake.t
    assert.equal(201, hedge.request(p, u.fn, opts()))
    assert.near(t0 + 0.05, u.starts[2], 1e-9)
    assert.same({ "start 1", "start 2", "read 2", "close 1" }, u.log)
    assert.equal(3, fake.spawned)
    assert.equal(1, fake.killed)
    assert.equal(1, fake.semaphores)
    assert.equal(0, fake.running())
  end)

  it("drains a semaphore that a copy posted after the winner", function()
    -- copies 1 and 2 end at the same time: both post, one is the
    -- answer, the other's post is left in the semaphore
    -- (times in binary fractions: both end at exactly 1000.125)
    local u = upstream(fake, { { 0.125, { 200 } }, { 0.0625, { 201 } } })
    local r = pack(hedge.request(p, u.fn, opts { delay = 0.0625 }))
    assert.equal(1, r.n)
    assert.equal(1000.125, fake.t)
    -- the pooled semaphore must not wake the next request at once: its
    -- hedge starts after the whole delay
    u = upstream(fake, { { 1, { 500 } }, { 0.01, { 202 } } })
    local t0 = fake.t
    assert.equal(202, hedge.request(p, u.fn, opts()))
    assert.near(t0 + 0.05, u.starts[2], 1e-9)
    assert.equal(1, fake.semaphores)
    assert.equal(0, fake.running())
  end)

  it("without ngx.semaphore, waits with a sleeper thread", function()
    package.loaded["ngx.semaphore"] = false
    local u = upstream(fake, { { 1, { 500 } }, { 0.01, { 201 } } })
    assert.equal(201, hedge.request(p, u.fn, opts()))
    assert.near(1000.05, u.starts[2], 1e-9)
    -- copies 1 and 2, a sleeper until the hedge, one until the next
    assert.equal(4, fake.spawned)
    assert.equal(0, fake.semaphores)
    assert.equal(0, fake.running())
  end)

  it("goes on with the sleeper when the semaphore refuses to wait",
     function()
    local new = fake.semaphore.new
    package.loaded["ngx.semaphore"] = { new = function(n)
      local sem = new(n)
      function sem.wait() return nil, "API disabled in the context" end
      return sem
    end }
    local u = upstream(fake, { { 1, { 500 } }, { 0.01, { 201 } } })
    assert.equal(201, hedge.request(p, u.fn, opts()))
    assert.near(1000.05, u.starts[2], 1e-9)
    assert.same({ "start 1", "start 2", "read 2", "close 1" }, u.log)
    assert.equal(0, fake.running())
  end)

  it("runs copy 1 in the request's coroutine when the pace refuses a "
     .. "hedge at the start: no thread, no hedge", function()
    local pc = hedge.pace { clock = fake.clock, shared = false }
    pc:pause(10)
    local u = upstream(fake, { { 1, { 200 } }, { 0.01, { 201 } } })
    assert.equal(200, hedge.request(p, u.fn, opts { pace = pc }))
    assert.same({ "start 1", "read 1" }, u.log)
    assert.equal(0, fake.spawned)
    assert.equal(0, fake.semaphores)
    assert.near(1001, fake.t, 1e-9)
    -- with max_attempts 1 too
    local one = backoff.constant { delay = 0, max_attempts = 1,
                                   clock = fake.clock }
    u = upstream(fake, { { 0.2, { 200 } } })
    assert.equal(200, hedge.request(one, u.fn, opts()))
    assert.equal(0, fake.spawned)
  end)

  it("an inline copy 1 that fails: the next copy starts at once, in a "
     .. "thread; the pace still refuses hedges", function()
    local pc = hedge.pace { clock = fake.clock, shared = false }
    pc:pause(10)
    local u = upstream(fake, { { 0.01, { nil, "connection refused" } },
                               { 1, { 201 } }, { 0.01, { 202 } } })
    local t0 = fake.t
    assert.equal(201, hedge.request(p, u.fn, opts { pace = pc }))
    assert.near(t0 + 0.01, u.starts[2], 1e-9)
    assert.is_nil(u.starts[3])               -- no hedge of copy 2
    assert.equal(1, fake.spawned)
    assert.equal(0, fake.running())
  end)

  it("an inline copy 1 that raises: the error as it came", function()
    local pc = hedge.pace { clock = fake.clock, shared = false }
    pc:pause(10)
    local boom = setmetatable({}, { __tostring = function() return "x" end })
    local ok, err = pcall(hedge.request, p, function() error(boom) end,
                          opts { pace = pc })
    assert.is_false(ok)
    assert.equal(boom, err)
    assert.equal(0, fake.spawned)
  end)
end)
