-- backoff.hedge.pace: how fast hedges may start, and whether they still
-- pay (doc/hedge.md, "pacing").  A budget bounds hedges over its window
-- (10 s): the onset of a slow episode could spend that window's
-- headroom in half a second.  The pace bounds them over every second,
-- and stops them when they stop winning.  One per upstream; a
-- hedge.request without option `pace` gets a per-worker one of its
-- budget (or of its policy when budget = false).
--
--   local p = hedge.pace { percent = 10, shared = ngx.shared.hedge,
--                          key = "api" }
--   p:request()                  a request starts (hedge.request)
--   p:allow() -> true | false, "paced" | "pushback"
--   p:hedged()                   a hedge started
--   p:outcome(n, won)            n hedges of a request ended; won: one
--                                of them gave the answer
--   p:pause(seconds)             the server's pushback: no hedge for that
--   p:share() -> the share of requests that may hedge now, and why
--
-- The rules, counted in 1 s slices (a slice's counts expire after
-- `window` + 2 slices):
--   * rate: a hedge may start when the hedges of the last second
--     (this slice and the part of the last one still inside it) are
--     fewer than share x the requests of that same second, or than
--     `burst` (so that the first hedges of a run, with no history, are
--     not refused);
--   * win rate: over the last `window` seconds, once `min_samples`
--     hedges have ended, if fewer than `min_win` of them gave the
--     answer, share is percent x `probe` and `burst` no longer applies
--     (but one probe when the window saw no hedge): the copies queue
--     behind the first ones (or every answer is slow), so hedging
--     stops but for a few probes that measure whether it pays again;
--     the verdict holds while no outcome is in the window, and the
--     probes alone may lift it;
--   * pushback: no hedge until the pause ends.
-- Shared by the workers with no lock (dict:incr); the pause is a
-- dict:set.  A full dict loses counts (more hedges, within the budget).

local check_mod = require "backoff.check"
local util = require "backoff.util"
local store = require "backoff.store"
local window = require "backoff.store.window"

local error, floor, getmetatable, select, setmetatable, type =
      error, math.floor, getmetatable, select, setmetatable, type
local huge = math.huge
local repr = util.repr

local CTOR = "backoff.hedge.pace"

local Pace = { __name = CTOR }
Pace.__index = Pace

local function check(self, method)
  if getmetatable(self) ~= Pace then
    check_mod.bad_self(method, CTOR, self)
  end
end

------------------------------------------------------------------------
-- counts per 1 s slice, in a store.window: "r" requests, "h" hedges
-- started, "d" hedges ended, "w" hedges won

local function now_of(self)
  local t = store.now(CTOR, self.clock)
  local last = self.last
  if last and t < last then return last end    -- never back
  self.last = t
  return t
end

local function get(self, i, name) return self.win:get(name, i) end

local function add(self, i, name, n) self.win:add(name, n, i) end

-- A worker's requests are counted in its memory and added to the dict
-- (one incr) when their slice ends, or REFRESH seconds after the first
-- of them: the other workers see them that late (fewer hedges, never
-- more).  allow() reads the counts of this slice and the last, the
-- pause and the win rate at most every REFRESH seconds (this worker's
-- own hedges count at once): the other workers' hedges of the last
-- REFRESH seconds may be unseen, a few more hedges, which the budget
-- still pays.
local REFRESH = 0.1

local function flush(self)
  local n = self.pend
  if n > 0 then
    self.pend = 0
    add(self, self.pend_i, "r", n)
  end
end

-- this worker's requests not yet in the dict, in slice i
local function pending(self, i)
  if self.pend_i == i then return self.pend end
  return 0
end

-- the hedges ended, won and started over the window up to slice i
local function sums(self, i)
  local win = self.win
  return win:sum("d", i), win:sum("w", i), win:sum("h", i)
end

-- the end of a pause in force, or nil: a time later than the longest
-- pause from now was not written here (store.foreign: deleted)
local function paused_until(self, t)
  local v = self.dict:get(self.pkey)
  if v == nil then return nil end
  if not store.time(v, t, self.max_pause + 1) then
    store.foreign(self.dict, self.pkey, v, CTOR, "the end of a pause")
    return nil
  end
  return v
end

-- the same, read at most every REFRESH seconds
local function pause_seen(self, t)
  if not self.pause_due or t >= self.pause_due or t < self.pause_at then
    self.pause_v = paused_until(self, t)
    self.pause_at, self.pause_due = t, t + REFRESH
  end
  return self.pause_v
end

-- the requests and hedges of slices i and i - 1, read at most every
-- REFRESH seconds; this worker's hedges since are counted on top
local function seen(self, i, t)
  if self.seen_i ~= i or t >= self.seen_due or t < self.seen_at then
    self.seen_i, self.seen_at, self.seen_due = i, t, t + REFRESH
    self.cur_r, self.cur_h = get(self, i, "r"), get(self, i, "h")
    self.last_r, self.last_h = get(self, i - 1, "r"), get(self, i - 1, "h")
    self.own_h = 0
  end
  return self.cur_r + pending(self, i), self.cur_h + self.own_h,
         self.last_r + pending(self, i - 1), self.last_h
end

-- the share of the requests that may hedge, and whether hedges lose.
-- The verdict is kept while the window holds no outcome; once losing,
-- the few probes judge (one win in four lifts it), so that a worker
-- stops for good while every copy loses, and resumes when they win.
local function share_at(self, i)
  local d, w = sums(self, i)
  if d >= self.min_samples or self.losing and d > 0 then
    self.losing = w < self.min_win * d
  end
  if self.losing then return self.rate * self.probe, true end
  return self.rate, false
end
------------------------------------------------------------------------
-- the methods

--- p:request(): a request starts (counted in this second's requests)
function Pace:request()
  check(self, "request")
  local t = now_of(self)
  local i = floor(t)
  if self.pend_i ~= i or t >= self.pend_due then
    flush(self)
    self.pend_i, self.pend_due = i, t + REFRESH
  end
  self.pend = self.pend + 1
end

-- the share now, from the verdict kept for REFRESH seconds (a local
-- outcome drops it)
local function share_seen(self, i, t)
  if not self.share_due or t >= self.share_due or self.share_i ~= i then
    self.share_v, self.share_l = share_at(self, i)
    self.share_i, self.share_due = i, t + REFRESH
  end
  return self.share_v, self.share_l
end

--- p:allow() -> true | false, reason: may a hedge start now?
function Pace:allow()
  check(self, "allow")
  local t = now_of(self)
  local until_ = pause_seen(self, t)
  if until_ and t < until_ then
    return false, "pushback"
  end
  local i = floor(t)
  local keep = 1 - (t - i)              -- the last slice's part still in
  local cr, ch, lr, lh = seen(self, i, t)
  local r = cr + lr * keep
  local h = ch + lh * keep
  local share, losing = share_seen(self, i, t)
  local most = share * r
  if not losing and most < self.burst then most = self.burst end
  if h + 1 <= most then return true end
  -- losing: a probe when the window saw no hedge at all
  if losing and select(3, sums(self, i)) == 0 then return true end
  return false, "paced"
end

--- p:hedged(): a hedge started
function Pace:hedged()
  check(self, "hedged")
  local i = floor(now_of(self))
  add(self, i, "h", 1)
  if self.seen_i == i then self.own_h = self.own_h + 1 end
end

--- p:outcome(n, won): n hedges of a request ended (won, cancelled,
-- failed), and whether one of them gave the request its answer
function Pace:outcome(n, won)
  check(self, "outcome")
  if type(n) ~= "number" or n < 1 or n ~= floor(n) or n > 2 ^ 31 then
    error("bad argument #1 to 'outcome' (a count of hedges >= 1 "
          .. "expected, got " .. repr(n) .. ")", 2)
  end
  local i = floor(now_of(self))
  add(self, i, "d", n)
  if won then add(self, i, "w", 1) end
  self.share_due = nil
end

--- p:pause(seconds): no hedge for that long (a server's pushback); a
-- longer pause in force is kept
function Pace:pause(seconds)
  check(self, "pause")
  if type(seconds) ~= "number" or not (seconds >= 0 and seconds < huge) then
    error("bad argument #1 to 'pause' (a finite number of seconds >= 0 "
          .. "expected, got " .. repr(seconds) .. ")", 2)
  end
  if seconds > self.max_pause then seconds = self.max_pause end
  local now = now_of(self)
  local t = now + seconds
  local old = paused_until(self, now)
  if not old or old < t then
    self.dict:set(self.pkey, t, seconds + 1)
    self.pause_due = nil
  end
end

--- p:share() -> the share of the requests that may hedge now (0 to 1),
-- and true when it is cut because hedges stopped winning
function Pace:share()
  check(self, "share")
  return share_at(self, floor(now_of(self)))
end

function Pace:__tostring()
  check(self, "__tostring")
  return ("%s: %g%% of the requests per second (burst %g), %g%% of that "
    .. "while fewer than %g%% of the hedges win%s"):format(CTOR,
    self.percent, self.burst, self.probe * 100, self.min_win * 100,
    self.shared and (", shared " .. repr(self.key)) or "")
end

------------------------------------------------------------------------
-- the constructor

local options = check_mod.options(CTOR, {
  percent = check_mod.number{ default = 10, min = 0, max = 100 },
  burst = check_mod.number{ default = 2, min = 0, max = 2 ^ 20,
    max_text = "2^20" },
  window = check_mod.count{ default = 10, min = 1, max = 3600 },
  min_samples = check_mod.count{ default = 10, min = 1, max = 2 ^ 31,
    max_text = "2^31" },
  min_win = check_mod.number{ default = 0.25, min = 0, max = 1 },
  probe = check_mod.number{ default = 0.1, min = 0, max = 1 },
  max_pause = check_mod.number{ default = 60, min = 0, max = 86400 },
  clock = check_mod.fn{},
  shared = check_mod.shared("pace"),
  key = check_mod.string{ default = "backoff:pace" },
})

--- pace(opts) -> a pace.  opts: percent (10), burst (2), window (10),
-- min_samples (10), min_win (0.25), probe (0.1), max_pause (60), clock
-- (ngx.now in nginx, else backoff.now), shared (a dict; inside nginx
-- required, or false), key ("backoff:pace")
local function new(opts)
  local o = options(opts)
  if o.shared == false or o.shared == nil then
    if type(opts) == "table" and opts.key ~= nil then
      check_mod.raise(CTOR .. ": option 'key' names keys in a dict, so "
        .. "it needs option 'shared' (an ngx.shared dict)")
    end
  end
  local self = { percent = o.percent, rate = o.percent / 100,
    burst = o.burst, window = o.window, min_samples = o.min_samples,
    min_win = o.min_win, probe = o.probe, max_pause = o.max_pause,
    clock = o.clock or util.shared_clock(), key = o.key,
    shared = o.shared or nil, pkey = o.key .. "|p:pause", pend = 0 }
  self.dict = store.dict(o.shared, self.clock)
  self.win = window.new { who = CTOR, span = o.window, slices = o.window,
    clock = self.clock, dict = o.shared or nil, prefix = o.key .. "|p:",
    lo = 0, hi = 2 ^ 53 - 1, cache = true }
  return setmetatable(self, Pace)
end

return { new = new, metatable = Pace }
