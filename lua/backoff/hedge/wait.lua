-- backoff.hedge.wait: how a hedged request waits for its copies
-- (internal: backoff.hedge's).  The request waits in its own coroutine:
-- on a semaphore that each copy posts when it ends (ngx.semaphore, where
-- lua-resty-core has it and the phase may wait on it), with the time to
-- the next start as its timeout; elsewhere on ngx.thread.wait with a
-- sleeper thread for the timeout.  Semaphores are kept per worker for
-- the next request (drained first).
--
--   st.sem = wait.semaphore(phase)   nil: the sleeper
--   c = wait.first(st, seconds)      the copy that ended (c.r its
--                                    results), or wait.SLEPT
--   wait.release(st)                 st.sem back to the pool

local error, pcall, require, type = error, pcall, require, type
local unpack = table.unpack or unpack       -- luacheck: ignore
local callable = require("backoff.util").callable

local M = {}

local SLEPT = {}                 -- what a wait that timed out returns
M.SLEPT = SLEPT

local SEMA_PHASES = { rewrite = true, server_rewrite = true,
                      access = true, content = true, timer = true }
local LONG = 3600                -- a wait with no limit, in rounds
local sema_pool, sema_tried = { n = 0 }, false

-- a semaphore for a request in phase `phase` (from the pool, or new),
-- or nil: the phase, or this nginx, has none
function M.semaphore(phase)
  if not SEMA_PHASES[phase] then return nil end
  local mod = package.loaded["ngx.semaphore"]
  if mod == nil and not sema_tried then
    sema_tried = true
    local ok, m = pcall(require, "ngx.semaphore")
    if ok then mod = m end
  end
  if type(mod) ~= "table" or not callable(mod.new) then return nil end
  local pool = sema_pool
  if pool.mod ~= mod then
    pool = { n = 0, mod = mod }
    sema_pool = pool
  end
  local n = pool.n
  if n > 0 then
    local s = pool[n]
    pool[n], pool.n = nil, n - 1
    return s
  end
  return (mod.new(0))
end

-- the request's semaphore back to the pool, drained (a copy that ended
-- after the winner posted it); at most 64 kept
function M.release(st)
  local sem = st.sem
  st.sem = nil
  local pool = sema_pool
  if not sem or pool.n >= 64 then return end
  while sem:count() > 0 do sem:wait(0) end
  local n = pool.n + 1
  pool[n], pool.n = sem, n
end

local function sleeper(ngx, seconds)
  ngx.sleep(seconds)
  return SLEPT
end

-- the copy that ended first: its thread reaped (it has ended: no wait)
local function reap(st)
  local live = st.live
  for i = 1, #live do
    local c = live[i]
    if c.r then
      st.ngx.thread.wait(c.thread)
      return c
    end
  end
  error("backoff.hedge: a copy posted but none ended", 0)   -- never
end

-- wait for the first copy to end, or `seconds` (nil: no limit): the
-- copy, or SLEPT
function M.first(st, seconds)
  if seconds and seconds < 0.001 then seconds = 0.001 end
  local sem = st.sem
  if sem then
    local ok, err = sem:wait(seconds or LONG)
    if ok then return reap(st) end
    if err == "timeout" then return SLEPT end
    -- the semaphore cannot be waited on here: this request goes on with
    -- the sleeper (its copies post no more)
    st.sem = nil
  end
  local ngx, live = st.ngx, st.live
  local list, n = {}, #live
  for i = 1, n do list[i] = live[i].thread end
  local nap
  if seconds then
    nap = ngx.thread.spawn(sleeper, ngx, seconds)
    n = n + 1
    list[n] = nap
  end
  local ok, c = ngx.thread.wait(unpack(list, 1, n))
  if nap and c ~= SLEPT then ngx.thread.kill(nap) end
  if not ok then error(c, 0) end    -- never: neither thread raises
  return c
end


return M
