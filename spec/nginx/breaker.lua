-- One backoff.breaker shared by the 4 workers of a real nginx (Debian's
-- nginx + libnginx-mod-http-lua), in front of an upstream on 127.0.0.1
-- that hangs (the gateway's timeouts are 200 ms), then flaps, then
-- recovers; a reload (HUP) while it is open.  Checked from the
-- upstream's access log and the breaker's hook (which logs every
-- transition with its time, interval and opening):
--   * each half-open period admits exactly the configured probes (2)
--     across the 4 workers, and no probe is sent outside one;
--   * once open, no other request reaches the upstream;
--   * the open intervals follow the policy (0.5 s doubling to 4 s,
--     +-20%): an opening after j - 1 hung probes in a row (each took
--     the 200 ms timeout) waits the j-th band, one after a probe that
--     failed fast (503) the first; half-open never before its interval
--     has passed, the escalation resets on closing;
--   * after recovery it closes within one open interval plus a probe;
--   * a reload while open keeps it open (same opening, same interval)
--     and the escalation goes on after it;
--   * the metrics agree with the hook; no error or crash in the error
--     log.
-- The time a refused call takes inside nginx is printed as a TAP
-- diagnostic (a figure, not an assertion).  Bounded: at most 40,000
-- calls and about 60 s; nginx runs under `timeout`, on free ports, and
-- is stopped by its pid.  TAP.
--   lua5.4 spec/nginx/breaker.lua ROOT
local ROOT = assert(arg[1], "usage: breaker.lua ROOT")
local H = dofile(ROOT .. "/spec/nginx/harness.lua")
local socket = require "socket"
local PREFIX = ROOT .. "/build/nginx-breaker"
local PYTHON = os.getenv("PYTHON") or "/usr/bin/python3"
local PROBES = 2
local INTERVAL = { initial = 0.5, max = 4, jitter = 0.2 }
local MAX_CALLS = 40000

local tap = H.tap(os.getenv("VERBOSE"))
local check = tap.check

local port
local function get(path) return H.get(port, path, 15) end

local calls, answers = 0, { reasons = {}, workers = {} }

-- an answer: counted
local function count(body)
  local f = H.fields(body, " \n")
  local r = f.reason
  if r == nil or r == "nil" then r = "none" end
  answers.reasons[r] = (answers.reasons[r] or 0) + 1
  if f.worker then answers.workers[f.worker] = true end
end

-- one call, sent; the socket to read its answer from
local function send_call()
  calls = calls + 1
  local c = socket.tcp()
  c:settimeout(15)
  if not c:connect("127.0.0.1", port) then c:close() return nil end
  c:send("GET /call?id=c" .. calls .. " HTTP/1.0\r\nHost: x\r\n\r\n")
  return c
end

local function receive(c)
  local all = c:receive("*a")
  c:close()
  count(all and all:match("\r\n\r\n(.*)$"))
end

-- `n` calls at once, answers awaited
local function batch(n)
  local cs = {}
  for i = 1, n do cs[i] = send_call() end
  for _, c in ipairs(cs) do receive(c) end
end

local function state()
  local s = H.fields(get("/state"), " \n")
  for k, v in pairs(s) do s[k] = tonumber(v) or v end
  return s
end

-- Calls at a steady rate (one every 2.5 ms: 400 a second) with at most
-- `conc` in flight, answers read as they come (a hung call does not
-- hold the others back), until done() (asked every 50 ms) or `limit`
-- seconds; then the calls in flight are awaited.
local function load(done, limit, conc)
  local t0 = socket.gettime()
  local flight, next_at, asked = {}, t0, t0
  local ok = done == nil
  while socket.gettime() - t0 < limit and calls < MAX_CALLS do
    local now = socket.gettime()
    while #flight < conc and now >= next_at do
      flight[#flight + 1] = send_call()
      next_at = next_at + 0.0025
    end
    if next_at < now - 0.05 then next_at = now end  -- no catching up
    local ready = socket.select(flight, nil, 0.0025)
    for _, c in ipairs(ready) do
      for i, f in ipairs(flight) do
        if f == c then table.remove(flight, i) break end
      end
      receive(c)
    end
    if done and now - asked >= 0.05 then
      asked = now
      if done() then ok = true break end
    end
  end
  for _, c in ipairs(flight) do receive(c) end
  return ok
end

local function mode(m)
  local body = get("/mode?m=" .. m)
  return tonumber(body and body:match("at=(%S+)"))
end

-- the transitions logged by the hook, in order of time
local function transitions()
  local t, ms = {}, {}
  for line in (get("/log") or ""):gmatch("[^\n]+") do
    local from, to, at, interval, opening, pid, hung =
      line:match("^(%S+) (%S+) (%S+) (%S+) (%d+) (%d+) (%d+)$")
    if from then
      t[#t + 1] = { from = from, to = to, at = tonumber(at),
        interval = tonumber(interval), opening = tonumber(opening),
        pid = pid, hung = tonumber(hung), seq = #t + 1 }
    else
      local v = line:match("^ms (%S+)$")
      if v then ms[#ms + 1] = tonumber(v) end
    end
  end
  -- by time, then in the order the hooks logged them: ngx.now() is
  -- the millisecond of the event loop's turn, and a probe that fails
  -- fast (503 from 127.0.0.1) can reopen it in the millisecond its
  -- half-open period was announced (an unstable sort on time alone put
  -- the reopening first)
  table.sort(t, function(a, b)
    if a.at ~= b.at then return a.at < b.at end
    return a.seq < b.seq
  end)
  return t, ms
end

-- the openings in a row now (0: closed)
local function opening() return state().opening or 0 end

-- every request the upstream received: arrival, id, probe, status
local function upstream_log()
  local out = {}
  for line in H.read_file(PREFIX .. "/logs/upstream.log"):gmatch("[^\n]+") do
    local msec, rt, id, probe, status =
      line:match("^(%S+) (%S+) (%S+) (%S+) (%d+)$")
    if msec then
      out[#out + 1] = { at = tonumber(msec) - tonumber(rt), id = id,
                        probe = probe == "1", status = tonumber(status) }
    end
  end
  return out
end

-- the band of the j-th open interval (j: 1 + the hung probes in a
-- row): [(1-f)c, min((1+f)d, max)], d = initial x 2^(j-1), c = min(d, max)
local function band(k)
  local d = INTERVAL.initial * 2 ^ (k - 1)
  local c = math.min(d, INTERVAL.max)
  return (1 - INTERVAL.jitter) * c, math.min((1 + INTERVAL.jitter) * d,
                                             INTERVAL.max)
end

local function worker_pids(n)
  local set = {}
  for _ = 1, n do
    local pid = (get("/ping") or ""):match("%d+")
    if pid then set[pid] = true end
  end
  return set
end

local function checks()
  -- healthy: every call succeeds, nothing reaches the breaker's rules
  mode("ok")
  for _ = 1, 5 do batch(12) end
  check(answers.reasons.none == 60 and state().state == "closed",
    "healthy: 60 calls succeed, the breaker stays closed",
    ("reasons: none %s"):format(tostring(answers.reasons.none)))

  -- hung: it opens, probes, reopens with longer intervals
  local t_hang = mode("hang")
  local opened = load(function() return opening() >= 3 end, 20, 8)
  local before = state()
  check(opened and before.state == "open" and before.opening == 3,
    "hung: it opens and reopens on its probes' timeouts (third opening "
    .. "in a row reached)", ("state %s opening %s"):format(before.state,
      before.opening))

  -- reload while open
  local master = H.read_file(PREFIX .. "/logs/nginx.pid"):match("%d+")
  local old = worker_pids(12)
  H.sh("kill -HUP " .. master)
  local fresh = false
  for _ = 1, 100 do
    socket.sleep(0.05)
    local now = worker_pids(8)
    fresh = next(now) ~= nil
    for pid in pairs(now) do if old[pid] then fresh = false end end
    if fresh then break end
  end
  local after = state()
  local t_after = transitions()
  local closed_since = false
  for _, e in ipairs(t_after) do
    if e.to == "closed" and e.at > t_hang then closed_since = true end
  end
  check(fresh and (after.state == "open" or after.state == "half_open")
    and after.opening == before.opening and after.since == before.since
    and after.interval == before.interval and not closed_since,
    "a reload (HUP) while open keeps it open: new workers, the same "
    .. "opening, since and interval", ("fresh workers %s; before %s %d "
    .. "%.3f %.3f; after %s %d %.3f %.3f"):format(tostring(fresh),
    before.state, before.opening, before.since, before.interval,
    after.state, after.opening, after.since, after.interval))
  -- a figure: refused calls one at a time, as a client sees them
  local lat = {}
  for _ = 1, 100 do
    calls = calls + 1
    local t0 = socket.gettime()
    local body = get("/call?id=s" .. calls)
    local t1 = socket.gettime()
    if body and body:find("reason=circuit_open attempts=0", 1, true) then
      lat[#lat + 1] = (t1 - t0) * 1000
    end
  end
  answers.client = lat
  local escalated = load(function() return opening() >= 4 end,
                         15, 8)
  check(escalated, "after the reload the escalation goes on (a fourth "
    .. "opening in a row)", "opening " .. opening())

  -- flapping, then recovered while open
  mode("flap")
  load(nil, 6, 8)
  load(function() return state().state == "open" end, 5, 8)
  local t_ok = mode("ok")
  local closed = load(function()
    local s = state()
    return s.state == "closed" and s.opening == 0
  end, 12, 8)
  for _ = 1, 4 do batch(10) end

  -- forced open by hand in one worker: every worker refuses, whatever
  -- the upstream; then automatic again
  get("/force?to=open")
  local before_reasons = answers.reasons.circuit_open or 0
  local all = answers.workers
  answers.workers = {}
  for _ = 1, 4 do batch(10) end
  local refused = (answers.reasons.circuit_open or 0) - before_reasons
  local nw = 0
  for pid in pairs(answers.workers) do nw, all[pid] = nw + 1, true end
  answers.workers = all
  local s = state()
  check(refused == 40 and nw >= 2 and s.state == "open"
    and s.forced == "open", "forced open in one worker: every worker "
    .. "refuses (state() says forced)", ("refused %d of 40 in %d "
    .. "workers; state %s forced %s"):format(refused, nw, s.state,
    tostring(s.forced)))
  get("/force?to=none")
  local none = answers.reasons.none or 0
  for _ = 1, 4 do batch(10) end
  check((answers.reasons.none or 0) - none == 40
    and state().state == "closed", "force(nil): automatic again, closed",
    ("answered %d of 40"):format((answers.reasons.none or 0) - none))
  return t_ok, closed
end

-- the checks of the logs, once nginx has stopped
local function analyse(t_ok, closed, trans, ms)
  local ups = upstream_log()
  -- open periods: each open transition, its interval and the end of the
  -- half-open period after it (the next transition out of half-open)
  local periods, bad_band, bad_k, early = {}, {}, {}, {}
  local k_prev, hung_most = 0, 0
  for i, e in ipairs(trans) do
    if e.to == "open" and e.opening == 0 then     -- forced by hand
      k_prev = 0
    elseif e.to == "open" then
      local lo, hi = band(e.hung + 1)
      if e.interval < lo - 1e-3 or e.interval > hi + 1e-3 then
        bad_band[#bad_band + 1] = ("k %d, hung %d: %.3f not in [%.3f, "
          .. "%.3f]"):format(e.opening, e.hung, e.interval, lo, hi)
      end
      if e.from == "closed" and e.hung ~= 0 then
        bad_band[#bad_band + 1] = ("opened from closed after %d hung "
          .. "probes"):format(e.hung)
      end
      if e.hung > hung_most then hung_most = e.hung end
      local want = e.from == "closed" and 1 or k_prev + 1
      if e.opening ~= want then
        bad_k[#bad_k + 1] = ("%s->open: opening %d, expected %d"):format(
          e.from, e.opening, want)
      end
      k_prev = e.opening
      local p = { open = e }
      for j = i + 1, #trans do
        local n = trans[j]
        if n.to == "half_open" and not p.half then
          p.half = n
          if n.at < e.at + e.interval - 1e-3 then
            early[#early + 1] = ("half-open at %.3f, open at %.3f + %.3f")
              :format(n.at, e.at, e.interval)
          end
        elseif n.from == "half_open" then
          p.stop = n
          break
        end
      end
      periods[#periods + 1] = p
    elseif e.to == "closed" then
      k_prev = 0
    end
  end
  check(#periods >= 4 and #bad_band == 0, ("every open interval is in "
    .. "its policy band (%d openings)"):format(#periods),
    table.concat(bad_band, "\n"))
  check(hung_most >= 2, "hung probes lengthen the interval (two or more "
    .. "hung in a row seen)", "most hung in a row: " .. hung_most)
  check(#bad_k == 0, "each reopening is the next in a row; closing resets"
    .. " the escalation", table.concat(bad_k, "\n"))
  check(#early == 0, "half-open never before the open interval has passed",
    table.concat(early, "\n"))

  -- probes per half-open period, from the upstream's log
  local wrong, probed, periods_probed, periods_full = {}, 0, 0, 0
  for _, p in ipairs(periods) do
    if p.half and p.stop then
      local from = p.open.at + p.open.interval - 0.002
      local n = 0
      for _, u in ipairs(ups) do
        if u.probe and u.at >= from and u.at <= p.stop.at + 0.002 then
          n = n + 1
        end
      end
      periods_probed = periods_probed + 1
      probed = probed + n
      -- exactly PROBES when it closed (all must succeed) or when the
      -- period lasted long enough for the test's calls to take every
      -- slot (150 ms: a hung probe times out after 200 ms); a probe
      -- that fails fast (503) may reopen it before the second comes
      local full = p.stop.to == "closed" or p.stop.at - from >= 0.15
      if n > PROBES or n < 1 or full and n ~= PROBES then
        wrong[#wrong + 1] = ("half-open %.3f..%.3f: %d probes"):format(from,
          p.stop.at, n)
      end
      if full then periods_full = periods_full + 1 end
    end
  end
  local total_probes = 0
  for _, u in ipairs(ups) do
    if u.probe then total_probes = total_probes + 1 end
  end
  check(periods_full >= 3 and #wrong == 0, ("each half-open period "
    .. "admitted exactly %d probes across the 4 workers (%d periods; %d "
    .. "more ended by a fast failure after 1 or 2)"):format(PROBES,
    periods_full, periods_probed - periods_full), table.concat(wrong, "\n"))
  -- the last period may still have had probes in flight when it was
  -- read: every probe the upstream saw belongs to a period
  check(total_probes >= probed and total_probes <= probed + PROBES,
    "no probe outside a half-open period", ("%d probes in the log, %d in "
    .. "periods"):format(total_probes, probed))

  -- once open, nothing else reaches the upstream
  local leaked = {}
  for _, p in ipairs(periods) do
    local stop = p.stop and p.stop.at or math.huge
    for _, u in ipairs(ups) do
      if not u.probe and u.at > p.open.at + 0.05 and u.at < stop then
        leaked[#leaked + 1] = ("%s at %.3f (open at %.3f)"):format(u.id,
          u.at, p.open.at)
      end
    end
  end
  check(#leaked == 0, "once open, no request but the probes reaches the "
    .. "upstream", table.concat(leaked, "\n", 1, math.min(#leaked, 10)))

  -- after recovery (while open): closed within one open interval plus
  -- a probe (200 ms), with 300 ms for the gaps between the test's calls
  local last_open, closed_at
  for _, e in ipairs(trans) do
    if e.to == "open" and (closed_at == nil or e.at <= t_ok) then
      last_open, closed_at = e, nil
    end
    if e.to == "closed" and e.at > t_ok and not closed_at then
      closed_at = e.at
    end
  end
  local bound = (last_open and last_open.interval or 0) + 0.2 + 0.3
  check(closed and closed_at and closed_at - t_ok <= bound,
    "after recovery it closes within one open interval plus a probe",
    ("recovered at %.3f, closed at %s, bound %.3f s"):format(t_ok,
      tostring(closed_at), bound))

  -- the metrics agree with the hook
  local f = assert(io.open(PREFIX .. "/metrics.txt", "w"))
  f:write(answers.metrics or "")
  f:close()
  local p = assert(io.popen(PYTHON .. " " .. ROOT
    .. "/spec/nginx/prom_parse.py <" .. PREFIX .. "/metrics.txt 2>&1"))
  local out = p:read("*a")
  p:close()
  local seen = { open = 0, half_open = 0, closed = 0 }
  for _, e in ipairs(trans) do seen[e.to] = seen[e.to] + 1 end
  local got, gauge, refusals = {}, nil, nil
  for line in out:gmatch("[^\n]+") do
    local to, v = line:match("^sample backoff_breaker_transitions_total "
      .. "name=7570,to=(%x+) (%S+)$")
    if to then
      got[(to:gsub("%x%x", function(h)
        return string.char(tonumber(h, 16)) end))] = tonumber(v)
    end
    v = line:match("^sample backoff_breaker_state name=7570 (%S+)$")
    if v then gauge = tonumber(v) end
    v = line:match("^sample backoff_breaker_refusals_total name=7570 (%S+)$")
    if v then refusals = tonumber(v) end
  end
  check(got.open == seen.open and got.half_open == seen.half_open
    and got.closed == seen.closed and gauge == 0
    and refusals and refusals >= #ms,
    "the metrics (read by prometheus_client) agree with the hook",
    ("metrics %s/%s/%s, hook %d/%d/%d, gauge %s, refusals %s, refused "
    .. "before any attempt %d\n%s"):format(tostring(got.open),
    tostring(got.half_open), tostring(got.closed), seen.open,
    seen.half_open, seen.closed, tostring(gauge), tostring(refusals), #ms,
    out:sub(1, 400)))

  -- a figure: how long a refused call takes inside nginx
  table.sort(ms)
  if #ms > 0 then
    local function q(x) return ms[math.max(1, math.ceil(x * #ms))] end
    print(("# refused while open, time inside nginx's handler over %d "
      .. "calls: p50 %.3f ms, p99 %.3f ms, max %.3f ms"):format(#ms,
      q(0.5), q(0.99),
      ms[#ms]))
  end
  local lat = answers.client or {}
  table.sort(lat)
  if #lat > 0 then
    print(("# refused while open, one at a time, as the client sees it "
      .. "(connect, request, answer on 127.0.0.1) over %d calls: p50 %.3f "
      .. "ms, p99 %.3f ms, max %.3f ms"):format(#lat,
      lat[math.ceil(0.5 * #lat)], lat[math.ceil(0.99 * #lat)], lat[#lat]))
  end
  local nworkers = 0
  for _ in pairs(answers.workers) do nworkers = nworkers + 1 end
  print(("# %d calls (%d refused while open), %d transitions, %d upstream "
    .. "requests, %d worker pids answered"):format(calls,
    answers.reasons.circuit_open or 0, #trans, #ups, nworkers))
  check(nworkers >= 4, "the calls were spread over the workers",
    nworkers .. " worker pids")
end

local function main()
  port = H.free_port()
  local up = H.free_port()
  local ok, err = H.start_nginx(PREFIX, ROOT .. "/spec/nginx/breaker.conf.in",
    { ROOT = ROOT, PORT = port, UP = up }, 110,
    function() return get("/ping") and true end)
  if not check(ok, "nginx with 4 workers and one shared breaker starts on "
               .. "127.0.0.1", err) then
    return
  end
  local fine, t_ok, closed = pcall(checks)
  check(fine, "the load phases ran without a Lua error", t_ok)
  answers.metrics = get("/metrics")
  local trans, ms = transitions()
  H.stop_nginx(PREFIX)
  if fine then
    local done, e = pcall(analyse, t_ok, closed, trans, ms)
    check(done, "the logs were read without a Lua error", e)
  end
  local bad = H.errors_logged(PREFIX)
  check(#bad == 0, "nginx logged no error and no worker crashed",
    table.concat(bad, "\n"))
end

main()
tap.plan()
