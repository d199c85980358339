-- The targets of bench/outage.lua for the recommended setting, its
-- tables and its markdown summary.
--   local T = dofile("bench/outage_targets.lua")
--   T.measure(results, kinds, by_id) -> { { rid, target, value, ok,
--     what, ref_overloaded }, ... }
--   T.print_tables(kinds, results, settings); T.markdown(...)
local T = {}

-- Each measurement: ok is nil for a figure that is reported, not
-- checked.  ref_overloaded: for the overload, when no retries
-- overloads as well; for success at 80%, when the token bucket
-- overloads (the sweep reports both).
T.TARGETS = {
  { id = "amp", text = "amplification in full outages (10, 60, 300 s)",
    limit = "<= 1.10", worst = "max", fmt = "%.3f" },
  { id = "succ", text = "failing 10-50%: success, points below no budget's",
    limit = "<= 2", worst = "max", fmt = "%.2f" },
  { id = "ovl", text = "overload after any event (s)", limit = "0",
    worst = "max", fmt = "%.1f" },
  { id = "drain", text = "drain after full outages and the brownout (s)",
    limit = "0", worst = "max", fmt = "%d" },
  { id = "drain_nob", text = "drain minus no budget's drain, any event (s)",
    limit = "<= 0", worst = "max", fmt = "%d" },
  { id = "s80", text = "failing 80%: success minus the token bucket's "
    .. "(points)", limit = ">= 0", worst = "min", fmt = "%.1f" },
  { id = "brown", text = "brownout: amplification (not a target: the "
    .. "retries made)", worst = "max", fmt = "%.3f" },
  { id = "tovl", text = "timeouts: overload after, minus AWS standard "
    .. "mode's (80, 100% hung; <= 0) or no budget's (50%; <= 0.2) (s)",
    limit = "<= 0, 0.2",
    worst = "max", fmt = "%.1f" },
  { id = "t50", text = "timeouts 50%, 60 s, hosts of 4: success (%)",
    limit = ">= 95", worst = "min", fmt = "%.1f" },
  { id = "t50p", text = "timeouts 50%, 60 s, per process: success (not "
    .. "a target, %)", worst = "min", fmt = "%.1f" },
  { id = "flap", text = "flapping 5 s / 5 s: success (%)", limit = ">= 65",
    worst = "min", fmt = "%.1f" },
  { id = "flapload", text = "flapping: budget alone >= 65% at <= 1.5x: "
    .. "its amplification (reported, not checked: no budget can, at 1.5x "
    .. "at most 62.6%, bench/flap_oracle.lua)", limit = "<= 1.5",
    worst = "max", fmt = "%.3f" },
  { id = "rep", text = "a second outage 3 s after a 10 s one: its "
    .. "amplification", limit = "<= 1.10", worst = "max", fmt = "%.3f" },
  { id = "back", text = "seconds until every second's requests succeed "
    .. "again (99%) after any event", limit = "<= no retries' (or 1)",
    worst = "max",
    fmt = "%.1f" },
  { id = "after", text = "success of the requests of the minute after an "
    .. "event (not a target, %)", worst = "min", fmt = "%.1f" },
  { id = "wasted", text = "capacity below the load: server work wasted on "
    .. "requests the client gave up (not a target, %)", worst = "max",
    fmt = "%.1f" },
  { id = "flapovl", text = "flapping: requests refused + seconds of "
    .. "overload after", limit = "0", worst = "max", fmt = "%.1f" },
  { id = "meta", text = "metastable storm: overload after (s)",
    limit = "0", worst = "max", fmt = "%.1f" },
  { id = "qsucc", text = "quiet hosts (2, 5/s per process), failing "
    .. "50%: success, points below no budget's", limit = "<= 2",
    worst = "max", fmt = "%.2f" },
  { id = "q80", text = "quiet hosts, failing 80%: success minus the "
    .. "token bucket's (points)", limit = ">= 0", worst = "min",
    fmt = "%.1f" },
  { id = "qamp", text = "quiet hosts, full outages: amplification",
    limit = "<= 1.10", worst = "max", fmt = "%.3f" },
  { id = "qp", text = "quiet processes (not a target: per process, "
    .. "success minus the reference's, points)", worst = "min",
    fmt = "%.1f" },
  { id = "mixed", text = "mixed fleet: success of the 1/s half (not a "
    .. "target, %)", worst = "min", fmt = "%.1f" },
  { id = "brk", text = "failing 10-50%: the recommended breaker's "
    .. "refusals (it never opens), success within 1 point of the same "
    .. "setting without it", limit = "0", worst = "max", fmt = "%d" },
  { id = "brec", text = "full outages 10, 60, 300 s: seconds until every "
    .. "second's requests succeed again, budget + breaker", limit = "<= 2",
    worst = "max", fmt = "%d" },
  { id = "bafter", text = "full outages: the minute after's success, "
    .. "budget + breaker minus budget alone (points)", limit = ">= -2",
    worst = "min", fmt = "%.1f" },
  { id = "bcut", text = "dead upstream 60 s: load with budget + breaker "
    .. "(amplification)", limit = "<= 0.10", worst = "max", fmt = "%.3f" },
  { id = "bpart", text = "ramp, 80% failing 60 s: success, budget + "
    .. "breaker minus budget alone (points)", limit = ">= -2",
    worst = "min", fmt = "%.1f" },
  { id = "bflap", text = "flapping 5 s / 5 s: success, budget + breaker "
    .. "minus budget alone (points)", limit = ">= -2", worst = "min",
    fmt = "%.1f" },
  { id = "bslow", text = "capacity down to 900/s: success, budget + "
    .. "breaker (%)", limit = ">= 90", worst = "min", fmt = "%.1f" },
}
T.TARGET = {}
for _, t in ipairs(T.TARGETS) do T.TARGET[t.id] = t end

-- the matrix's measurements of setting rid in event e of kind k
local function matrix(add, r, ev, row, ref)
  local nob = row.retries
  if ev.share == 1 then
    add("amp", r.amplification, r.amplification <= 1.10)
  end
  if ev.share == 1 or ev.brownout then add("drain", r.drain, r.drain == 0) end
  if ev.brownout then add("brown", r.amplification, nil) end
  -- the reference: no retries overloads too (a small fleet, whose queue
  -- passes `slow` by chance)
  add("ovl", r.overload, r.overload == 0, row.none and row.none.overload > 0)
  if nob then
    add("drain_nob", r.drain - nob.drain, r.drain <= nob.drain)
    if ev.share and ev.share <= 0.5 then
      add("succ", 100 * (nob.success_in - r.success_in),
          r.success_in >= nob.success_in - 0.02)
    end
  end
  local tb = row[ref]
  if ev.share == 0.8 and tb then
    add("s80", 100 * (r.success_in - tb.success_in),
        r.success_in >= tb.success_in, tb.overload > 0)
  end
end

-- quiet processes: checked per host (sharing is the default inside
-- nginx) at 2 and 5 requests/s, reported per process and at 1/s
local function quiet(add, r, ev, row, ref, rate, per_host)
  local checked = per_host and rate >= 2
  local nob, tb = row.retries, row[ref]
  if ev.share <= 0.5 and nob then
    local gap = 100 * (nob.success_in - r.success_in)
    if checked then
      add("qsucc", gap, r.success_in >= nob.success_in - 0.02)
    else
      add("qp", -gap, nil)
    end
  elseif ev.share == 0.8 and tb then
    local d = 100 * (r.success_in - tb.success_in)
    if checked then
      add("q80", d, r.success_in >= tb.success_in, tb.overload > 0)
    else
      add("qp", d, nil)
    end
  elseif ev.share == 1 and per_host then
    add("qamp", r.amplification, r.amplification <= 1.10)
  end
  if per_host then add("ovl", r.overload, r.overload == 0) end
end

-- the bad days' measurements
local function bad_day(add, r, kind, ev, row, rid)
  local per_host = rid == "rec4"
  if kind.timeouts then
    -- a half-hung upstream's retries are its successes' (95% kept):
    -- those of its last second's hung attempts come back with the new
    -- requests, as without a budget (within 0.2 s: where the last of
    -- them lands is the jitter's)
    local hung = ev.share >= 0.8
    local ref = row[hung and (per_host and "aws4" or "aws") or "retries"]
    if ref then
      local d = r.overload - ref.overload
      add("tovl", d, d <= (hung and 0 or 0.2 + 1e-9))
    end
    if ev.share == 0.5 and ev.len == 60 then
      if per_host then add("t50", 100 * r.success_in, r.success_in >= 0.95)
      else add("t50p", 100 * r.success_in, nil) end
    end
  elseif kind.flap then
    add("flap", 100 * r.success_in, r.success_in >= 0.65)
    add("flapload", r.amplification, nil)
    add("flapovl", r.shed + r.overload, r.shed == 0 and r.overload == 0)
  elseif kind.metastable then
    add("meta", r.overload, r.overload == 0)
  elseif kind.quiet then
    quiet(add, r, ev, row, per_host and "token4" or "token", kind.quiet,
          per_host)
  elseif kind.mixed then
    add("mixed", 100 * r.group_success[1], nil)
    add("ovl", r.overload, r.overload == 0)
  elseif kind.repeated then
    local a2 = T.second_amp(r, ev)
    add("rep", a2, a2 <= 1.10)
  elseif kind.slowcap then
    add("wasted", 100 * r.wasted, nil)
  end
  if kind.ramp or kind.step or kind.herd or kind.repeated or kind.slowcap
  then
    add("ovl", r.overload, r.overload <= row.retries.overload)
  end
end

-- the amplification of a repeated outage's second one: attempts
-- received / requests issued in its seconds
function T.second_amp(r, ev)
  local a, q = 0, 0
  for b = r.start + ev.second + 1, r.start + ev.len do
    a, q = a + (r.received[b] or 0), q + (r.issued[b] or 0)
  end
  return q > 0 and a / q or 1
end

-- the recommended breaker in partial outages of 10-50%: it never opens,
-- so success is that of the same setting without it
local BREAKER_ROWS = { brk4 = "retries", recbrk4 = "rec4" }
local function breaker(out, results, kinds, by_id)
  for rid, base in pairs(BREAKER_ROWS) do
    for k, kind in ipairs(kinds) do
      for e, ev in ipairs(kind.events) do
        local row = results[k][e]
        local r, b = row[rid], row[base]
        if r and b and kind.matrix and ev.share and ev.share <= 0.5 then
          out[#out + 1] = { rid = rid, target = "brk", value = r.opened,
            ok = r.opened == 0 and r.success_in >= b.success_in - 0.01,
            what = ("%s, %s, %d s"):format(by_id[rid].name, kind.title,
                                           ev.len) }
        end
      end
    end
  end
end

-- budget + breaker against the budget alone (host of 4): recovery after
-- full outages, the load of a dead upstream, partly-up days
local function breaker_days(out, results, kinds, by_id)
  if not by_id.recbrk4 then return end
  for k, kind in ipairs(kinds) do
    for e, ev in ipairs(kind.events) do
      local row = results[k][e]
      local r, b = row.recbrk4, row.rec4
      local what = ("%s, %s, %d s"):format(by_id.recbrk4.name, kind.title,
                                           ev.len)
      local function add(target, value, ok)
        out[#out + 1] = { rid = "recbrk4", target = target, value = value,
                          ok = ok, what = what }
      end
      if r and kind.recovery then
        add("brec", r.recover, r.recover <= 2)
        if b then
          add("bafter", 100 * (r.after - b.after), r.after >= b.after - 0.02)
        end
      elseif r and kind.matrix and ev.share == 1 and ev.len == 60 then
        add("bcut", r.amplification, r.amplification <= 0.10)
      elseif r and kind.slowcap then
        add("bslow", 100 * r.success_in, r.success_in >= 0.90)
      end
      if r and b and kind.flap then
        add("bflap", 100 * (r.success_in - b.success_in),
            r.success_in >= b.success_in - 0.02)
      elseif r and b and (kind.ramp
                      or kind.matrix and ev.share == 0.8 and ev.len == 60)
      then
        add("bpart", 100 * (r.success_in - b.success_in),
            r.success_in >= b.success_in - 0.02)
      end
    end
  end
end

function T.measure(results, kinds, by_id)
  local out = {}
  breaker(out, results, kinds, by_id)
  breaker_days(out, results, kinds, by_id)
  for _, rid in ipairs { "rec", "rec4" } do
    local ref = rid == "rec" and "token" or "token4"
    if by_id[rid] then
      for k, kind in ipairs(kinds) do
        for e, ev in ipairs(kind.events) do
          local row = results[k][e]
          local r = row[rid]
          if r then
            local what = ("%s, %s, %d s"):format(by_id[rid].name,
                                                 kind.title, ev.len)
            local function add(target, value, ok, extra)
              out[#out + 1] = { rid = rid, target = target, value = value,
                ok = ok, what = what, ref_overloaded = extra }
            end
            if kind.matrix then
              matrix(add, r, ev, row, ref)
            else
              bad_day(add, r, kind, ev, row, rid)
            end
            -- no later than without retries (or within a second)
            local none = row.none and row.none.back or 0
            add("back", r.back, r.back <= math.max(1, none))
            add("after", 100 * r.after, nil)
          end
        end
      end
    end
  end
  return out
end

------------------------------------------------------------------------
-- the tables

local function cell(kind, r)
  if not r then
    return kind.wide and ("%-30s"):format("  -") or ("%-18s"):format("  -")
  end
  local c = ("%5.2f %5.1f %3d %4.1f"):format(r.amplification,
    100 * r.success_in, r.drain, r.overload)
  if kind.mixed then
    c = c .. (" %5.1f %5.1f"):format(100 * r.group_success[1],
                                     100 * r.group_success[2])
  elseif kind.recovery then
    c = c .. (" %3d %5.1f"):format(r.recover, 100 * r.after)
  elseif kind.wide then
    c = c .. (" %6d %4.1f"):format(r.shed, r.overloaded)
  end
  if kind.more then
    c = c .. (" %4d %5.1f"):format(r.back, 100 * r.after)
    if kind.repeated then c = c .. (" %5.2f"):format(r.amp2) end
    if kind.slowcap then c = c .. (" %5.1f"):format(100 * r.wasted) end
  end
  return c
end

function T.print_tables(kinds, results, settings)
  for k, kind in ipairs(kinds) do
    kind.more = kind.repeated or kind.ramp or kind.step or kind.herd
      or kind.slowcap
    kind.wide = kind.timeouts or kind.flap or kind.metastable or kind.more
    local w = (kind.wide or kind.mixed) and 30 or kind.recovery and 28
              or 18
    if kind.more then w = 41 end
    if kind.repeated then
      for _, r in pairs(results[k][1]) do
        r.amp2 = T.second_amp(r, kind.events[1])
      end
    end
    local head, sub = ("\n%-26s"):format(kind.title), ("%-26s"):format(
      "setting")
    if #kind.title > 26 then head, sub = "\n" .. kind.title .. "\n"
      .. (" "):rep(26), sub end
    for _, ev in ipairs(kind.events) do
      head = head .. ("  %-" .. w .. "s"):format(
        (ev.share and ev.share < 1 and not kind.matrix and not kind.quiet
         and ("---- %d%%, %d s ----"):format(ev.share * 100, ev.len))
        or ("---- %d s ----"):format(ev.len))
      sub = sub .. ("  %5s %5s %3s %4s"):format("amp", "succ", "dr", "ovl")
      if kind.mixed then
        sub = sub .. (" %5s %5s"):format("1/s", "20/s")
      elseif kind.recovery then
        sub = sub .. (" %3s %5s"):format("rec", "after")
      elseif kind.wide then
        sub = sub .. (" %6s %4s"):format("shed", "busy")
      end
      if kind.more then
        sub = sub .. (" %4s %5s"):format("back", "after")
        if kind.repeated then sub = sub .. (" %5s"):format("amp2") end
        if kind.slowcap then sub = sub .. (" %5s"):format("waste") end
      end
    end
    print(head)
    print(sub)
    for _, s in ipairs(settings) do
      if results[k][1][s.id] then
        local line = ("%-26s"):format(s.name)
        for e in ipairs(kind.events) do
          line = line .. "  " .. cell(kind, results[k][e][s.id])
        end
        print(line)
      end
    end
  end
end

------------------------------------------------------------------------
-- the markdown summaries, for doc/budget.md

local function find(kinds, id)
  for k, kind in ipairs(kinds) do
    if kind.id == id then return k end
  end
end

local function table_of(kinds, results, settings, cols)
  local h, sep = "| setting |", "|---|"
  for _, c in ipairs(cols) do
    h, sep = h .. " " .. c[1] .. " |", sep .. "---|"
  end
  print("\n" .. h .. "\n" .. sep)
  for _, s in ipairs(settings) do
    local line, any = "| " .. s.name .. " |", false
    for _, c in ipairs(cols) do
      local k = find(kinds, c[2])
      local r = k and results[k][c[3]][s.id]
      line = line .. " " .. (r and c[4](r) or "-") .. " |"
      any = any or r ~= nil
    end
    if any then print(line) end
  end
end

local function pct(r) return ("%.1f%%"):format(100 * r.success_in) end
local function amp(r) return ("%.2f"):format(r.amplification) end
local function both(r) return pct(r) .. " / " .. amp(r) end
local function drain(r) return ("%s / %d s"):format(pct(r), r.drain) end
local function ovl(r) return ("%.1f s"):format(r.overload) end
local function succ_ovl(r) return ("%s / %.1f s"):format(pct(r), r.overload) end
local function flap(r)
  return ("%s / %d / %.1f s"):format(pct(r), r.shed, r.overload)
end
local function half(r) return ("%.1f%%"):format(100 * r.group_success[1]) end
local function amp2(r)
  return ("%.2f / %.2f"):format(r.amplification, r.amp2 or 0)
end
local function flapamp(r)
  return ("%s / %.2f"):format(pct(r), r.amplification)
end
local function waste(r)
  return ("%s / %.1f%%"):format(pct(r), 100 * r.wasted)
end
local function back(r)
  return ("%d s / %.1f%%"):format(r.back, 100 * r.after)
end

function T.markdown(kinds, results, settings)
  if find(kinds, "fail80") then
    table_of(kinds, results, settings, {
      { "10%, 60 s: succ", "fail10", 2, pct },
      { "50%, 60 s: succ", "fail50", 2, pct },
      { "80%, 60 s: succ / amp", "fail80", 2, both },
      { "100%, 10 s: amp", "fail100", 1, amp },
      { "100%, 60 s: amp", "fail100", 2, amp },
      { "100%, 300 s: amp", "fail100", 3, amp },
      { "brownout: succ / drain", "brownout", 1, drain },
    })
  end
  if find(kinds, "flap") then
    table_of(kinds, results, settings, {
      { "timeouts 100%, 10 s: succ / ovl", "timeout100", 1, succ_ovl },
      { "timeouts 80%, 10 s: succ / ovl", "timeout80", 1, succ_ovl },
      { "timeouts 50%, 60 s: succ / ovl", "timeout50", 2, succ_ovl },
      { "flapping: succ / shed / ovl", "flap", 1, flap },
      { "metastable, 10 s: ovl", "metastable", 1, ovl },
    })
    table_of(kinds, results, settings, {
      { "2/s, 50%, 10 s", "quiet2_50", 1, pct },
      { "2/s, 80%, 10 s", "quiet2_80", 1, pct },
      { "5/s, 50%, 10 s", "quiet5_50", 1, pct },
      { "5/s, 80%, 10 s", "quiet5_80", 1, pct },
      { "1/s, 50%, 60 s", "quiet1_50", 2, pct },
      { "mixed, 50%: 1/s half", "mixed", 1, half },
      { "mixed, 80%: 1/s half", "mixed", 2, half },
    })
  end
  if find(kinds, "repeat") then
    table_of(kinds, results, settings, {
      { "flapping: succ / amp", "flap", 1, flapamp },
      { "repeated: amp / 2nd's", "repeat", 1, amp2 },
      { "ramp: succ / amp", "ramp", 1, both },
      { "10x step, 50%: succ / ovl", "step", 1, succ_ovl },
      { "held herd: succ / ovl", "herd", 1, succ_ovl },
      { "900/s: succ / wasted", "slowcap", 1, waste },
      { "timeouts 50%, 60 s: back / after", "timeout50", 2, back },
      { "100%, 300 s: back / after", "fail100", 3, back },
    })
  end
end

return T
