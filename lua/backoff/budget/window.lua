-- backoff.budget.window: counters over a sliding time window, for the
-- ratio and adaptive budgets: `n` slices of `window / n` seconds each;
-- a sum covers the current slice and the n - 1 before it (Finagle's
-- WindowedAdder).  In-process: a ring of slices in this Lua state.
-- Shared: one dict key per counter and slice, named after the slice's
-- absolute number (the budget's key, ":", the counter's letter, the
-- number in base 36) and written with incr (init 0) and an expiry of one
-- window plus one slice, so old slices vanish by themselves; a missing
-- slice (expired, evicted, never written) counts 0.
--
-- Time comes from the budget's clock (seconds, finite); a clock that
-- goes back counts as no time passed.

local C = require "backoff.budget.common"

local floor, ipairs, pairs, setmetatable, type =
      math.floor, ipairs, pairs, setmetatable, type

local W = {}

-- the slice number of now, never lower than one already used (a bad
-- clock raises at the caller of the method, 3 levels up from here)
local function slice_of(self)
  local i = C.slice_of(self.ctor, self.clock, self.len, self.last)
  return i
end

------------------------------------------------------------------------
-- in-process: counters[name][slot], slot = slice % n

local Ring = {}
Ring.__index = Ring

-- move to slice i, zeroing the slots of the slices passed over
local function advance(self, i)
  local last = self.last
  if last == i then return end
  self.last = i
  local n = self.n
  local from = last and last + 1 or i - n + 1
  if i - from >= n then from = i - n + 1 end
  for _, c in pairs(self.counters) do
    for j = from, i do c[j % n] = 0 end
  end
end

-- add v to counter name in the current slice; returns the slice
function Ring:add(name, v)
  local i = slice_of(self)
  advance(self, i)
  local c = self.counters[name]
  local s = i % self.n
  c[s] = c[s] + v
  return i
end

-- add v to counter name in slice i (a slice still in the window)
function Ring:add_at(name, v, i)
  local last = self.last
  if i > last - self.n then
    local c = self.counters[name]
    local s = i % self.n
    c[s] = c[s] + v
  end
end

-- the sum of counter name over the window
function Ring:sum(name)
  advance(self, slice_of(self))
  local c, t = self.counters[name], 0
  for j = 0, self.n - 1 do t = t + c[j] end
  return t
end

function W.ring(ctor, window, n, clock, names)
  local counters = {}
  for _, name in ipairs(names) do
    local c = {}
    for j = 0, n - 1 do c[j] = 0 end
    counters[name] = c
  end
  return setmetatable({ ctor = ctor, len = window / n, n = n,
    clock = clock, counters = counters }, Ring)
end

------------------------------------------------------------------------
-- shared: key prefix .. name .. ":" .. slice

local Dict = {}
Dict.__index = Dict

-- a slice count this module can have written: an integer within
-- +-2^50 (anything else is corrupt)
local LIMIT = 2 ^ 50
local function ok_value(v)
  return type(v) == "number" and v == floor(v) and v >= -LIMIT
    and v <= LIMIT
end

function Dict:add_at(name, v, i)
  local dict, k = self.dict, self.prefix .. name .. C.short(i)
  local r, err = C.incr(dict, k, v, 0, self.ttl)
  if not r then return nil, err end
  if not ok_value(r) then return nil, C.corrupt(dict, k, r) end
  return i
end

function Dict:add(name, v)
  local i = slice_of(self)
  self.last = i
  return self:add_at(name, v, i)
end

-- the sum over the window, or nil, err when a slice is corrupt (a read
-- deletes nothing: the next write to it does, or its expiry)
function Dict:sum(name)
  local i = slice_of(self)
  self.last = i
  local dict, p, t = self.dict, self.prefix .. name, 0
  for j = i - self.n + 1, i do
    local v = dict:get(p .. C.short(j))
    if v ~= nil then
      if not ok_value(v) then
        return nil, "corrupt value under key " .. C.repr(p .. C.short(j))
                    .. " (" .. C.repr(v) .. ")"
      end
      t = t + v
    end
  end
  return t
end

function W.dict(ctor, window, n, clock, dict, prefix)
  local len = window / n
  return setmetatable({ ctor = ctor, len = len, n = n, clock = clock,
    dict = dict, prefix = prefix .. ":", ttl = window + len }, Dict)
end

return W
