-- backoff.store.window: the one sliding window (internal), for every
-- object that counts over recent time: the ratio and adaptive budgets,
-- the earned budget's reserve, the hedge's latency histogram.
--
-- A span of `slices` slices of span / slices seconds each, numbered from
-- the clock (floor(now / len)); a sum covers the current slice and the
-- slices - 1 before it (Finagle's WindowedAdder, resilience4j's
-- SlidingTimeWindowMetrics).  Any number of named series.
--
-- In this Lua state (no dict): a ring per series, slot i % slices
-- tagged with the slice it holds, so that a slot left by time reads 0.
-- Shared (a dict of backoff.store): one key per series and slice,
-- prefix .. base36(slice) .. name, written with incr (init 0) and an
-- expiry of one span plus one slice, so old slices vanish by
-- themselves; a missing slice (expired, evicted, never written) counts
-- 0, and a value the window cannot have written is foreign
-- (store.foreign: logged, deleted, 0).  With `cache`, a sum reads the
-- slices before the last once per slice (nobody writes them any more)
-- and the last two afresh.
--
-- Time comes from the object's clock (store.now: a finite number, or
-- an error at the caller's line); a clock that goes back counts as no
-- time passed.

local store = require "backoff.store"

local floor, setmetatable = math.floor, setmetatable

local W = {}

local DIGITS = "0123456789abcdefghijklmnopqrstuvwxyz"

--- window.short(v) -> a number as short exact text: an integer in
-- base 36 ("6000" -> "4mo"), anything else as %.17g.  Dict keys stay
-- short: nginx hashes every key of every dict call, a few ns a byte.
local function short(v)
  if v ~= floor(v) or v < 0 or v >= 2 ^ 53 then
    return ("%.17g"):format(v)
  end
  if v == 0 then return "0" end
  local out = ""
  while v > 0 do
    local d = v % 36
    out = DIGITS:sub(d + 1, d + 1) .. out
    v = (v - d) / 36
  end
  return out
end
W.short = short

-- beyond 2^52 slices, i + 1 is no longer exact (a float's steps are 2
-- and more; on 5.4 near 2^63 an integer wraps): the loops over a span
-- would never end.  Such a clock stays at the edge, as no time passing.
local SLICE_MAX = 4503599627370496     -- 2^52

--- window.slice_of(who, clock, len, last) -> floor(clock() / len),
-- never below last, within +-2^52
local function slice_of(who, clock, len, last)
  local i = floor(store.now(who, clock) / len)
  if i > SLICE_MAX then i = SLICE_MAX elseif i < -SLICE_MAX then
    i = -SLICE_MAX end
  if last and i < last then i = last end
  return i
end
W.slice_of = slice_of

local Window = {}
Window.__index = Window

--- w:slice() -> the slice of now (and the window moves to it)
function Window:slice()
  local i = slice_of(self.who, self.clock, self.len, self.last)
  self.last = i
  return i
end

-- the dict key of series name in slice i; the keys of the slices in
-- use are kept (nginx hashes every key anyway, but building it, base 36
-- digit by digit, was most of a hedged request's work in the window)
local function key(self, name, i)
  local keys = self.keys
  local ks = keys[i]
  if not ks then
    if keys.n >= 2 * self.n + 4 then
      keys = { n = 0 }
      self.keys = keys
    end
    ks = { head = self.prefix .. short(i) }
    keys[i], keys.n = ks, keys.n + 1
  end
  local k = ks[name]
  if not k then
    k = ks.head .. name
    ks[name] = k
  end
  return k
end

-- a value this window can have written
local function ok(self, v)
  return store.count(v, self.lo, self.hi)
end

-- the ring of series name (made on first use)
local function ring(self, name)
  local r = self.rings[name]
  if not r then
    r = { tag = {} }
    self.rings[name] = r
  end
  return r
end

--- w:add(name, v [, i]) -> i, or nil, err: v added to series name in
-- slice i (default: now).  A slice that has left the span takes nothing.
-- A value the window cannot have written is foreign: deleted (read as
-- missing), and v added afresh.
function Window:add(name, v, i)
  i = i or self:slice()
  local dict = self.dict
  if dict then
    local k = key(self, name, i)
    for _ = 1, 2 do
      local r, err = store.incr(dict, k, v, 0, self.ttl)
      if r and ok(self, r) then return i end
      if r then
        store.foreign(dict, k, r - v, self.who, "a count")
      elseif err == "not a number" then
        store.foreign(dict, k, dict:get(k), self.who, "a count")
      else
        return nil, err
      end
    end
    return nil, "foreign values under key '" .. k .. "'"
  end
  local r, j = ring(self, name), i % self.n
  local tag = r.tag[j]
  if tag ~= i then
    if tag and tag > i then return i end        -- left the span
    r.tag[j], r[j] = i, 0
  end
  r[j] = r[j] + v
  return i
end

--- w:get(name, i) -> series name's value in slice i (0 when missing)
function Window:get(name, i)
  local dict = self.dict
  if dict then
    local k = key(self, name, i)
    local v = dict:get(k)
    if v == nil then return 0 end
    if not ok(self, v) then
      store.foreign(dict, k, v, self.who, "a count")
      return 0
    end
    return v
  end
  local r = self.rings[name]
  if r and r.tag[i % self.n] == i then return r[i % self.n] end
  return 0
end

--- w:sum(name [, i]) -> series name summed over the span ending in
-- slice i (default: now)
function Window:sum(name, i)
  i = i or self:slice()
  local get, t = Window.get, 0
  if self.cache then
    local c = self.sums[name]
    if not c or c.at ~= i then
      local s = 0
      for j = i - self.n + 1, i - 2 do s = s + get(self, name, j) end
      c = c or {}
      c.at, c.s = i, s
      self.sums[name] = c
    end
    return c.s + get(self, name, i - 1) + get(self, name, i)
  end
  for j = i - self.n + 1, i do t = t + get(self, name, j) end
  return t
end

--- window.new(o) -> a window.  o: who (the object's name, for
-- messages), span (seconds), slices, clock, dict (a store dict: shared;
-- nil: this Lua state), prefix (of its keys in the dict), lo and hi
-- (the values a slice may hold: default +-2^50), cache (see above)
function W.new(o)
  local len = o.span / o.slices
  return setmetatable({ who = o.who, len = len, n = o.slices,
    clock = o.clock, dict = o.dict, prefix = o.prefix or "",
    ttl = o.span + len, lo = o.lo or -2 ^ 50, hi = o.hi or 2 ^ 50,
    cache = o.cache, sums = {}, rings = {}, keys = { n = 0 } }, Window)
end

return W
