-- A fake ngx with light threads in virtual time, for the hedging spec
-- (spec/55-hedge_spec.lua):
--   local fake = dofile("spec/fake_ngx_threads.lua")()
--   rawset(_G, "ngx", fake)
-- Threads are coroutines run by the fake itself, as lua-nginx-module
-- runs them: spawn(f, ...) runs f until it sleeps or ends and returns
-- the thread; wait(t1, t2, ...) runs every thread that can run, the
-- earliest to wake first, moving the clock to its time, until one of
-- t1, t2 ... has ended, and returns its results (true, ... or false,
-- err); kill(t) stops a thread that has not ended ("already
-- terminated" when it has, "already waited or killed").  sleep(s) in a
-- thread yields until the clock reaches now + s; in the entry code (no
-- thread) it runs the threads due meanwhile and moves the clock.
-- f.semaphore is ngx.semaphore's shape (see below).
-- Extras for the specs:
--   f.phase         what get_phase() answers (default "content")
--   f.clock         a function giving the virtual time (for options)
--   f.t             the virtual time now (seconds, starts at 1000)
--   f.spawned, f.killed, f.waits  counts
--   f.threads       every thread spawned: { state = "run" | "sleep" |
--                   "done" | "waited" | "killed", name, ... }
local function pack(...) return { n = select("#", ...), ... } end
local unpack = table.unpack or unpack       -- luacheck: ignore

return function()
  local f = { phase = "content", t = 1000, spawned = 0, killed = 0,
              waits = 0, threads = {}, logged = {} }
  local current                      -- the thread running, nil: entry

  function f.clock() return f.t end
  f.now = f.clock
  function f.update_time() end
  function f.get_phase() return f.phase end
  f.WARN, f.ERR = 5, 4
  function f.log(level, ...)
    f.logged[#f.logged + 1] = { level, table.concat({ ... }) }
  end

  local function resume(th, ...)
    local prev = current
    current = th
    local r = pack(coroutine.resume(th.co, ...))
    current = prev
    if coroutine.status(th.co) == "dead" then
      th.state, th.results = "done", r
    else
      local y = r[2]
      assert(type(y) == "table" and y.wake, "fake ngx: a thread yielded "
             .. "something other than a sleep")
      th.state, th.wake = "sleep", y.wake
    end
  end

  -- the sleeping thread that wakes first (the first spawned on ties)
  local function earliest()
    local best
    for _, th in ipairs(f.threads) do
      if th.state == "sleep" and (not best or th.wake < best.wake) then
        best = th
      end
    end
    return best
  end

  -- run the thread that wakes first; false when none sleeps
  local function step()
    local th = earliest()
    if not th then return false end
    if th.wake > f.t then f.t = th.wake end
    resume(th)
    return true
  end

  function f.sleep(s)
    assert(type(s) == "number" and s >= 0, "fake ngx: bad sleep")
    if current then
      coroutine.yield({ wake = f.t + s })
      return
    end
    local wake = f.t + s
    while true do
      local th = earliest()
      if not th or th.wake > wake then break end
      step()
    end
    if wake > f.t then f.t = wake end
  end

  f.thread = {}

  function f.thread.spawn(fn, ...)
    assert(type(fn) == "function", "fake ngx: spawn needs a function")
    local th = { co = coroutine.create(fn), state = "run" }
    f.threads[#f.threads + 1] = th
    f.spawned = f.spawned + 1
    resume(th, ...)
    return th
  end

  function f.thread.wait(...)
    local list = { ... }
    assert(#list > 0, "fake ngx: wait needs threads")
    f.waits = f.waits + 1
    while true do
      for _, th in ipairs(list) do
        if th.state == "done" then
          th.state = "waited"
          return unpack(th.results, 1, th.results.n)
        end
        assert(th.state ~= "waited" and th.state ~= "killed",
               "fake ngx: wait on a thread already waited or killed")
      end
      if not step() then error("fake ngx: no thread can run") end
    end
  end

  function f.thread.kill(th)
    if th.state == "sleep" or th.state == "run" then
      th.state = "killed"
      f.killed = f.killed + 1
      return 1
    elseif th.state == "done" then
      th.state = "killed"
      return nil, "already terminated"
    end
    return nil, "already waited or killed"
  end

  -- ngx.semaphore's shape (new, post, count, wait), for a spec to put
  -- in package.loaded["ngx.semaphore"]; waited on from the entry code:
  -- the threads due run, the clock moves, until a post or the timeout
  f.semaphore = {}
  f.semaphores = 0
  function f.semaphore.new(n)
    f.semaphores = f.semaphores + 1
    local sem = { n = n or 0 }
    function sem.post(self, k) self.n = self.n + (k or 1) end
    function sem.count(self) return self.n end
    function sem.wait(self, timeout)
      assert(not current, "fake ngx: a semaphore waited on in a thread")
      local wake = f.t + (timeout or 0)
      while self.n <= 0 do
        local th = earliest()
        if not th or th.wake > wake then break end
        step()
        -- the others due by now run in the same round (nginx runs every
        -- expired timer before the waiter resumes): two may post
        th = earliest()
        while th and th.wake <= f.t do
          step()
          th = earliest()
        end
      end
      if self.n > 0 then
        self.n = self.n - 1
        return true
      end
      if wake > f.t then f.t = wake end
      return nil, "timeout"
    end
    return sem
  end

  -- threads neither ended nor killed (a hedge must leave none)
  function f.running()
    local n = 0
    for _, th in ipairs(f.threads) do
      if th.state == "sleep" or th.state == "run" then n = n + 1 end
    end
    return n
  end

  return f
end
