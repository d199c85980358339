-- backoff.budget.slices: the reserve's counts of backoff.budget.earned
-- (internal): units (thousandths of a token) per slice of span / 10
-- seconds, in two series: the reserve's (in this Lua state a ring, shared
-- one dict key per slice: dkey:<slice>) and the credit's (cring,
-- dkey:<slice>:r).  Each function takes the budget itself (self): its
-- clock, len, span, dict or rings, and the pending units pu of slice pi.

local C = require "backoff.budget.common"

local floor, type = math.floor, type
local short = C.short

local S = {}

local SLICES = 10                       -- a span is 10 slices
S.SLICES = SLICES

-- a slice count this module can have written: an integer from 0 to
-- 2^50 (anything else is corrupt, and counts 0)
local LIMIT = 2 ^ 50
local function ok_count(v)
  return type(v) == "number" and v == floor(v) and v >= 0 and v <= LIMIT
end

-- the slice of now, never before the last one used (a clock that goes
-- back counts as no time passed; a bad clock raises at the caller of
-- the method, 3 levels up from here)
function S.slice_now(self)
  local i = C.slice_of(self.ctor, self.clock, self.len, self.pi)
  return i
end

-- add u units to slice i of a series: true, or nil, err (dict error,
-- corrupt value)
function S.put(self, i, u, credit)
  if self.shared then
    local dict = self.dict
    local k = self.dkey .. ":" .. short(i) .. (credit and ":r" or "")
    local r, err = C.incr(dict, k, u, 0, self.ttl)
    if not r then return nil, err end
    if not ok_count(r) then return nil, C.corrupt(dict, k, r) end
  else
    local j = i % SLICES
    local ring = credit and self.cring or self.ring
    if ring.tag[j] ~= i then ring.tag[j], ring[j] = i, 0 end
    ring[j] = ring[j] + u
  end
  return true
end

-- the units of slice i of a series (missing, expired or corrupt: 0)
local function get(self, i, credit)
  if self.shared then
    local v = self.dict:get(self.dkey .. ":" .. short(i)
                            .. (credit and ":r" or ""))
    if v == nil or not ok_count(v) then return 0 end
    return v
  end
  local j = i % SLICES
  local ring = credit and self.cring or self.ring
  if ring.tag[j] == i then return ring[j] end
  return 0
end

-- give the pending units to their slice: true, or nil, err (the units
-- are dropped: fewer counts, a smaller reserve)
function S.flush(self)
  local u = self.pu
  if u == 0 then return true end
  self.pu = 0
  return S.put(self, self.pi, u)
end

-- move to slice i (flushing the units pending for the one before,
-- unless it has left the span)
function S.advance(self, i)
  local last = self.pi
  if i ~= last then
    if last and i - last < SLICES then S.flush(self) end
    self.pi, self.pu = i, 0
  end
end

-- count u units of B in slice i (now)
function S.count(self, u, i)
  S.advance(self, i)
  self.pu = self.pu + u
end

-- the sum of a series over the span at slice i: the slices before the
-- last once per slice (cached in self[cache]), the last and the current
-- read afresh (other workers write theirs when they move on)
function S.span_sum(self, i, credit)
  local at = credit and "cci" or "ci"
  local sum = credit and "ccs" or "cs"
  if self[at] ~= i then
    local s = 0
    for j = i - SLICES + 1, i - 2 do s = s + get(self, j, credit) end
    self[at], self[sum] = i, s
  end
  return self[sum] + get(self, i - 1, credit) + get(self, i, credit)
end

return S
