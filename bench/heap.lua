-- A binary min-heap of events for the virtual-time simulations
-- (bench/herd.lua, bench/outage.lua): parallel arrays, so no table per
-- event. Each event is a time and three values. Of two events at the
-- same time, which pops first is fixed by the push order alone, so the
-- simulations give the same figures on every Lua.
--
--   local push, pop, empty = dofile("bench/heap.lua")()
--   push(t, a, b, c); local t, a, b, c = pop()
--   peek() -> the time of the next pop (when not empty())
return function()
  local ht, ha, hb, hc, size = {}, {}, {}, {}, 0
  local function push(t, a, b, c)
    size = size + 1
    local i = size
    while i > 1 do
      local p = (i - i % 2) / 2
      if ht[p] <= t then break end
      ht[i], ha[i], hb[i], hc[i] = ht[p], ha[p], hb[p], hc[p]
      i = p
    end
    ht[i], ha[i], hb[i], hc[i] = t, a, b, c
  end
  local function pop()
    local t, a, b, c = ht[1], ha[1], hb[1], hc[1]
    local lt, la, lb, lc = ht[size], ha[size], hb[size], hc[size]
    size = size - 1
    local i = 1
    while true do
      local l = 2 * i
      if l > size then break end
      if l < size and ht[l + 1] < ht[l] then l = l + 1 end
      if lt <= ht[l] then break end
      ht[i], ha[i], hb[i], hc[i] = ht[l], ha[l], hb[l], hc[l]
      i = l
    end
    ht[i], ha[i], hb[i], hc[i] = lt, la, lb, lc
    return t, a, b, c
  end
  local function empty() return size == 0 end
  local function peek() return ht[1] end
  return push, pop, empty, peek
end
