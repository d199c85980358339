-- backoff.hedge.latency: the hedging delay from an upstream's recent
-- latency, kept per key in an ngx.shared dict (or in this Lua state).
-- doc/hedge.md is the reference.
--
--   local lat = hedge.latency { shared = ngx.shared.hedge, key = "api" }
--   lat:observe(0.0023)        -- what backoff.hedge does for every copy
--   lat:delay()                -- -> seconds: the percentile, bounded
--
-- The estimator: a histogram of latencies in buckets of a quarter
-- octave (each bucket's upper edge 2^(1/4), 19% above its lower one),
-- from 0.5 ms to 131 s (the first and the last bucket also hold what is
-- below or above), counted per time slice: a span (10 s) is 5 slices of
-- span / 5, numbered from the clock (floor(now / slice)), and a count
-- expires when its slice has left the span.  delay() is the upper edge
-- of the bucket holding the `percentile`-th latency of the span (an
-- estimate never below the true percentile, at most 19% above it),
-- bounded by min_delay and max_delay; max_delay while the span holds
-- fewer than min_samples latencies.
--
-- Shared by the workers with no lock: a worker counts its latencies in
-- memory and adds them, one dict:incr per bucket of a slice (init 0,
-- expiring after span + one slice), when the slice ends, slice / 8
-- seconds after the first, or before it reads the histogram: the other
-- workers see them at most that late.  Each
-- worker reads the histogram at most every slice / 8 seconds and keeps
-- the delay meanwhile: the slices before the last are summed once per
-- slice (no one writes them any more), the last and the current are
-- read afresh.  Every worker must read the same clock (ngx.now, the
-- default inside nginx); a clock that goes back counts as no time
-- passed.  A full dict loses counts (said once in the error log): a
-- smaller histogram, the same rule.

local check_mod = require "backoff.check"
local util = require "backoff.util"
local store = require "backoff.store"
local window = require "backoff.store.window"

local error, floor, getmetatable, log, pairs, setmetatable, type =
      error, math.floor, getmetatable, math.log, pairs, setmetatable, type
local huge = math.huge
local repr, raise = util.repr, check_mod.raise

-- a number as the same text on every Lua ("90", not "90.0")
local num = util.num

local CTOR = "backoff.hedge.latency"
local SLICES = 5                 -- a span is 5 slices
local PER_OCTAVE = 4
local BASE = 0.0005              -- the first bucket's upper edge / 2^(1/4)
local BUCKETS = 72               -- 18 octaves: 0.5 ms to 131 s
local SCALE = PER_OCTAVE / log(2)

-- the bucket of a latency (seconds >= 0)
local function bucket(s)
  if s <= BASE then return 0 end
  local i = floor(log(s / BASE) * SCALE)
  if i >= BUCKETS then return BUCKETS - 1 end
  return i
end

-- the upper edge of bucket i
local function edge(i)
  return BASE * 2 ^ ((i + 1) / PER_OCTAVE)
end

local Latency = { __name = CTOR }
Latency.__index = Latency

local function check(self, method)
  if getmetatable(self) ~= Latency then
    check_mod.bad_self(method, CTOR, self)
  end
end

------------------------------------------------------------------------
-- the histogram's storage: a slice's bucket counts

-- the window's series of bucket b, and of group g (the count of its
-- octave: buckets 4g to 4g + 3), so that a reader asks only for the
-- buckets of the octaves that hold latencies
local NAMES, GROUPS = {}, {}
for b = 0, BUCKETS - 1 do NAMES[b] = ":" .. b end
for g = 0, BUCKETS / PER_OCTAVE - 1 do GROUPS[g] = ":g" .. g end

-- n latencies in series name (a bucket, a group) of slice i; a count
-- that cannot be kept (a full dict) is said once per estimator in the
-- error log
local function put(self, name, n, i)
  local ok, err = self.win:add(name, n, i)
  if not ok and not self.warned then
    self.warned = true
    store.log("WARN", CTOR, ": latencies lost for '", self.key, "': ", err,
              " (make the lua_shared_dict larger)")
  end
end

-- A worker keeps its latencies in memory, per bucket, and adds them to
-- the histogram (one incr per bucket) when their slice ends, `refresh`
-- seconds after the first, or before it reads the histogram
local function flush(self)
  local pend = self.pend
  if self.npend == 0 then return end
  local i = self.pend_i
  self.pend, self.npend = {}, 0
  local groups = {}
  for b, n in pairs(pend) do
    put(self, NAMES[b], n, i)
    local g = floor(b / PER_OCTAVE)
    groups[g] = (groups[g] or 0) + n
  end
  for g, n in pairs(groups) do put(self, GROUPS[g], n, i) end
end

------------------------------------------------------------------------
-- the estimate

-- slice j's counts per bucket added to t (the buckets of the octaves
-- whose group count is not 0)
local function add_slice(win, t, j)
  for g = 0, BUCKETS / PER_OCTAVE - 1 do
    if win:get(GROUPS[g], j) > 0 then
      for b = g * PER_OCTAVE, g * PER_OCTAVE + PER_OCTAVE - 1 do
        t[b] = t[b] + win:get(NAMES[b], j)
      end
    end
  end
  return t
end

local function zeros()
  local t = {}
  for b = 0, BUCKETS - 1 do t[b] = 0 end
  return t
end

-- the counts of the span now (slice i), per bucket, and their sum: the
-- slices before the last are summed once per slice (no one writes them
-- any more); the last is read afresh until `refresh` seconds into this
-- slice (the workers' latencies of its end arrive by then), then kept;
-- this slice afresh
local function histogram(self, i, now)
  local win = self.win
  if self.old_i ~= i then
    local old = zeros()
    for j = i - SLICES + 1, i - 2 do add_slice(win, old, j) end
    self.old, self.old_i, self.last = old, i, nil
  end
  local last = self.last
  if not last then
    last = add_slice(win, zeros(), i - 1)
    if now >= i * self.len + self.refresh then self.last = last end
  end
  local h, n, old = add_slice(win, zeros(), i), 0, self.old
  for b = 0, BUCKETS - 1 do
    local c = h[b] + old[b] + last[b]
    h[b], n = c, n + c
  end
  return h, n
end

-- the delay now, read afresh
local function estimate(self, i, now)
  local h, n = histogram(self, i, now)
  self.n = n
  if n < self.min_samples then return self.max_delay end
  local want = n * self.percentile / 100
  local sum = 0
  local d = edge(BUCKETS - 1)
  for b = 0, BUCKETS - 1 do
    sum = sum + h[b]
    if sum >= want then d = edge(b) break end
  end
  if d < self.min_delay then return self.min_delay end
  if d > self.max_delay then return self.max_delay end
  return d
end

--- lat:delay() -> seconds: the hedging delay now
function Latency:delay()
  check(self, "delay")
  local now = store.now(CTOR, self.clock)
  local due = self.due
  -- kept until due, unless it was cold and this worker alone has taught
  -- it enough since
  if due and now < due and now >= due - self.refresh
     and not (self.n < self.min_samples
              and self.n + self.fresh >= self.min_samples) then
    return self.cached
  end
  flush(self)
  local d = estimate(self, self.win:slice(), now)
  self.cached, self.due, self.fresh = d, now + self.refresh, 0
  return d
end

--- lat:observe(seconds): one latency seen (a copy's, from its start to
-- its answer; a copy cancelled or timed out: the time it ran, a lower
-- bound that keeps the percentile honest)
function Latency:observe(seconds)
  check(self, "observe")
  if type(seconds) ~= "number" or not (seconds >= 0 and seconds < huge) then
    error("bad argument #1 to 'observe' (a finite number of seconds >= 0 "
          .. "expected, got " .. repr(seconds) .. ")", 2)
  end
  local now = store.now(CTOR, self.clock)
  local i = floor(now / self.len)
  if self.pend_i ~= i or now >= self.pend_due or now < self.pend_at then
    flush(self)
    self.pend_i, self.pend_at, self.pend_due = i, now, now + self.refresh
  end
  local b, pend = bucket(seconds), self.pend
  pend[b] = (pend[b] or 0) + 1
  self.npend = self.npend + 1
  self.fresh = self.fresh + 1
end

--- lat:samples() -> the latencies the span holds now (read afresh)
function Latency:samples()
  check(self, "samples")
  flush(self)
  local i = self.win:slice()
  local _, n = histogram(self, i, store.now(CTOR, self.clock))
  return n
end

function Latency:__tostring()
  check(self, "__tostring")
  return ("%s: p%s of %s s, within [%s, %s] s%s"):format(CTOR,
    num(self.percentile), num(self.span), repr(self.min_delay),
    repr(self.max_delay),
    self.dict and (", shared " .. repr(self.key)) or "")
end

------------------------------------------------------------------------
-- the constructor

local options = check_mod.options(CTOR, {
  percentile = check_mod.number{ default = 90, min = 0, max = 100,
                                 open_min = true },
  min_delay = check_mod.number{ default = 0.005, min = 0, max = 2 ^ 31,
    text = "a number of seconds >= 0 and <= 2^31" },
  max_delay = check_mod.number{ default = 1, min = 0, max = 2 ^ 31,
    open_min = true, text = "a number of seconds > 0 and <= 2^31" },
  span = check_mod.number{ default = 10, min = 1, max = 3600,
    text = "a number of seconds >= 1 and <= 3600" },
  min_samples = check_mod.count{ default = 20, max = 2 ^ 31,
                                 max_text = "2^31" },
  clock = check_mod.fn{},
  -- inside nginx a dict, or false: each worker would learn the latency
  -- apart
  shared = check_mod.shared("histogram"),
  key = check_mod.string{ default = "backoff:hedge" },
})

-- where the histogram lives: o.shared (a dict), or this Lua state
local function storage(self, o, key_given)
  if not o.shared then                    -- false, or outside nginx
    if key_given then
      raise(CTOR .. ": option 'key' names keys in a dict, so it needs "
            .. "option 'shared' (an ngx.shared dict)")
    end
    return
  end
  self.dict, self.key, self.dkey = o.shared, o.key, o.key .. "|h:"
end

--- latency(opts) -> an estimator.  opts: percentile (90), min_delay
-- (0.005), max_delay (1), span (10), min_samples (20), clock (ngx.now
-- in nginx, else backoff.now), shared (a dict; inside nginx required,
-- or false), key ("backoff:hedge")
local function new(opts)
  local o = options(opts)
  if o.min_delay > o.max_delay then
    -- 5 for 5 ms is the likely slip: say the seconds it was meant as
    raise(CTOR .. ": option 'min_delay' must be <= max_delay (got "
          .. repr(o.min_delay) .. " > " .. repr(o.max_delay) .. "); times "
          .. "are seconds (" .. o.min_delay / 1000 .. " for "
          .. repr(o.min_delay) .. " ms)")
  end
  local self = { percentile = o.percentile, min_delay = o.min_delay,
    max_delay = o.max_delay, span = o.span, min_samples = o.min_samples,
    len = o.span / SLICES, n = 0, fresh = 0, pend = {}, npend = 0 }
  self.refresh = self.len / 8
  self.clock = o.clock or util.shared_clock()
  storage(self, o, type(opts) == "table" and opts.key ~= nil)
  self.win = window.new { who = CTOR, span = o.span, slices = SLICES,
    clock = self.clock, dict = self.dict, prefix = self.dkey, lo = 0,
    hi = 2 ^ 53 - 1, cache = true }
  return setmetatable(self, Latency)
end

return { new = new, metatable = Latency, bucket = bucket, edge = edge }
