-- backoff.budget.slices: the counts of backoff.budget.earned over time
-- (internal), per slice of span / 10 seconds, in the series of one
-- backoff.store.window (self.win): the reserve's units (thousandths of
-- a token, ""), the credit's (":r"), and for the price of a timeout the
-- attempts (":a") and the timeouts retried (":t"); shared, one dict key
-- per slice and series (dkey:<slice>, dkey:<slice>:r, ...).  Each
-- function takes the budget itself (self): its window and what is
-- pending for slice pi (pu units, pa attempts, pt timeouts).

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

-- give the pending attempts and timeouts to their slice, when the clock
-- leaves it (errors drop them: fewer counts).  The attempts of a slice
-- without a failure are not written (the good day's one incr per
-- second stays one): a share of timeouts is then computed over fewer
-- attempts, so errs high.
local function flush_share(self)
  local t = self.pt
  if t > 0 then
    self.pt = 0
    self.win:add(":t", t, self.pi)
  end
  local a = self.pa
  if a > 0 and self.pbad then
    self.pa = 0
    self.win:add(":a", a, self.pi)
  end
end

-- give the pending counts to their slice: true, or nil, err (the units
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
    if last and i - last < S.SLICES then
      S.flush(self)
      if self.pa ~= 0 or self.pt ~= 0 then flush_share(self) end
    end
    self.pi, self.pu, self.pa, self.pt, self.pbad = i, 0, 0, 0, false
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

-- the timeouts and the attempts of the last `n` slices up to slice i
-- (now: this worker's pending ones included)
function S.recent(self, i, n)
  local w, a, t = self.win, 0, 0
  if self.pi == i then a, t = self.pa, self.pt end
  for j = i - n + 1, i do
    a = a + w:get(":a", j)
    t = t + w:get(":t", j)
  end
  return t, a
end

return S
