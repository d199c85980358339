-- backoff.budget.slices: the reserve's counts of backoff.budget.earned
-- (internal): units (thousandths of a token) per slice of span / 10
-- seconds, in two series of one backoff.store.window (self.win): the
-- reserve's ("") and the credit's (":r"); shared, one dict key per
-- slice and series (dkey:<slice>, dkey:<slice>:r).  Each function takes
-- the budget itself (self): its window and the pending units pu of
-- slice pi.

local S = {}

S.SLICES = 10                           -- a span is 10 slices
S.MAX = 2 ^ 50                          -- what a slice may hold

local function series(credit) return credit and ":r" or "" end

-- the slice of now, never before the last one used (a clock that goes
-- back counts as no time passed; a bad clock raises at the caller's line)
function S.slice_now(self)
  return self.win:slice()
end

-- add u units to slice i of a series: true, or nil, err (dict error,
-- foreign value)
function S.put(self, i, u, credit)
  local ok, err = self.win:add(series(credit), u, i)
  if not ok then return nil, err end
  return true
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
    if last and i - last < S.SLICES then S.flush(self) end
    self.pi, self.pu = i, 0
  end
end

-- count u units of B in slice i (now)
function S.count(self, u, i)
  S.advance(self, i)
  self.pu = self.pu + u
end

-- the sum of a series over the span at slice i: the slices before the
-- last once per slice, the last and the current read afresh (other
-- workers write theirs when they move on)
function S.span_sum(self, i, credit)
  return self.win:sum(series(credit), i)
end

return S
