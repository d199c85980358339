-- The recommended budget and breaker on two bad days, in a real nginx
-- of 4 workers (Debian's nginx + libnginx-mod-http-lua), the load sent
-- from inside nginx (open loop, light threads; bench/README.md's
-- method), all on 127.0.0.1:
--   A. the upstream dead (503 at once) for 60 s, then back: the breaker
--      closes within 2 s of its return, and the upstream's own log shows
--      the traffic back by then; while dead, the upstream sees a tenth
--      of the requests or less;
--   B. the upstream flapping (down 5 s, up 5 s) for 20 s, with the
--      breaker and without it side by side: the success with it is not
--      below the success without it (3 points of tolerance: 400
--      requests each);
--   C. a second outage 3 s after a first (each 10 s dead), the budget
--      alone: the upstream sees no more attempts in the second than in
--      the first (the credit lent after a recovery must not pay for a
--      storm at the next failure).
-- Bounded: 40 requests/s for about 75 s, then 2 x 20/s for 20 s, then
-- 40/s for 28 s; nginx runs under `timeout` and is stopped by its pid.
-- TAP.
--   lua5.4 spec/nginx/breaker_days.lua ROOT
local ROOT = assert(arg[1], "usage: breaker_days.lua ROOT")
local H = dofile(ROOT .. "/spec/nginx/harness.lua")
local socket = require "socket"
local PREFIX = ROOT .. "/build/nginx-breaker-days"

local tap = H.tap(os.getenv("VERBOSE"))
local check = tap.check

local port
local function get(path, timeout) return H.get(port, path, timeout or 10) end
local function mode(m)
  local body = get("/mode?m=" .. (m:gsub(" ", "%%20")))
  return tonumber((body or ""):match("at=(%S+)"))
end

-- the stats: counts[tag][sec] = { issued, ok }, transitions { from, to, at }
local function stats()
  local counts, trans = {}, {}
  for line in (get("/stats") or ""):gmatch("[^\n]+") do
    local tag, sec, n, ok = line:match("^c (%S+) (%d+) (%d+) (%d+)$")
    if tag then
      counts[tag] = counts[tag] or {}
      counts[tag][tonumber(sec)] = { tonumber(n), tonumber(ok) }
    end
    local from, to, at = line:match("^t (%S+) (%S+) (%S+)$")
    if from then trans[#trans + 1] = { from, to, tonumber(at) } end
  end
  return counts, trans
end

-- the upstream's answers (time, status), from its log
local function upstream_log()
  local out = {}
  for t, status in H.read_file(PREFIX .. "/logs/upstream.log")
      :gmatch("(%S+) (%d+)\n") do
    out[#out + 1] = { tonumber(t), tonumber(status) }
  end
  return out
end

local function count_between(log, a, b, status)
  local n = 0
  for _, e in ipairs(log) do
    if e[1] >= a and e[1] < b and (not status or e[2] == status) then
      n = n + 1
    end
  end
  return n
end

local function outage_day()
  local rate, pre, dead, post = 40, 5, 60, 10
  mode("ok")
  local drive = H.start_get(port, ("/drive?route=with&tag=A&secs=%d&rate=%d")
    :format(pre + dead + post, rate), pre + dead + post + 40)
  socket.sleep(pre)
  local t_dead = mode("dead")
  socket.sleep(dead)
  local t_back = mode("ok")
  local body = drive()
  check(body and body:find("t0=", 1, true), "A: the load ran to its end",
        body)
  local _, trans = stats()
  local closed
  for _, t in ipairs(trans) do
    if t[2] == "closed" and t[3] >= t_back and not closed then
      closed = t[3]
    end
  end
  local opened = false
  for _, t in ipairs(trans) do
    if t[2] == "open" and t[3] >= t_dead and t[3] < t_back then
      opened = true
    end
  end
  check(opened and closed and closed - t_back <= 2, "A: the breaker "
    .. "opened while the upstream was dead and closed within 2 s of its "
    .. "return", ("closed %.2f s after the return"):format(
      closed and closed - t_back or -1))
  local log = upstream_log()
  local before = count_between(log, t_dead - 3, t_dead) / 3
  local back = count_between(log, t_back + 2, t_back + 3, 200)
  check(before > 0 and back >= 0.5 * before, "A: the upstream's log "
    .. "shows the traffic back within 2 s of its return",
    ("%.1f/s before the outage, %d in its return's third second")
    :format(before, back))
  local during = count_between(log, t_dead + 5, t_back)
  local issued = rate * (t_back - t_dead - 5)
  check(during <= 0.10 * issued, "A: while dead, the upstream saw a tenth "
    .. "of the requests or less", ("%d of %.0f (%.3fx)"):format(during,
    issued, during / issued))
end

local function flapping_day()
  local secs, rate = 20, 20
  mode("flap 5 5")
  local w = H.start_get(port, ("/drive?route=with&tag=W&secs=%d&rate=%d")
    :format(secs, rate), secs + 40)
  local n = H.start_get(port, ("/drive?route=without&tag=N&secs=%d&rate=%d")
    :format(secs, rate), secs + 40)
  local bw, bn = w(), n()
  mode("ok")
  local counts = stats()
  local function share(tag)
    local issued, ok = 0, 0
    for _, c in pairs(counts[tag] or {}) do
      issued, ok = issued + c[1], ok + c[2]
    end
    return issued > 0 and ok / issued or 0, issued
  end
  local sw, nw = share("W")
  local sn, nn = share("N")
  check(bw and bn and nw >= 0.9 * secs * rate and nn >= 0.9 * secs * rate
    and sw >= sn - 0.03, "B: flapping 5 s / 5 s: success with the breaker "
    .. "not below success without it",
    ("with %.1f%% of %d, without %.1f%% of %d"):format(100 * sw, nw,
      100 * sn, nn))
end

local function repeated_day()
  local rate, pre, dead, gap = 40, 3, 10, 3
  mode("ok")
  local drive = H.start_get(port,
    ("/drive?route=without&tag=C&secs=%d&rate=%d"):format(
      pre + 2 * dead + gap + 2, rate), pre + 2 * dead + gap + 40)
  socket.sleep(pre)
  local d1 = mode("dead")
  socket.sleep(dead)
  local b1 = mode("ok")
  socket.sleep(gap)
  local d2 = mode("dead")
  socket.sleep(dead)
  local b2 = mode("ok")
  local body = drive()
  local log = upstream_log()
  local first = count_between(log, d1, b1)
  local second = count_between(log, d2, b2)
  local issued = rate * dead
  print(("# C: attempts reaching the dead upstream: first outage %d, "
    .. "second %d (%d requests in each)"):format(first, second, issued))
  check(body and body:find("t0=", 1, true) and first > 0
    and second <= first + 0.02 * issued, "C: a second outage 3 s after "
    .. "the first: no more attempts reach the upstream than in the first",
    ("first %d, second %d attempts (%d requests in each)"):format(first,
      second, issued))
end

local function main()
  port = H.free_port()
  local up = H.free_port()
  local ok, err = H.start_nginx(PREFIX,
    ROOT .. "/spec/nginx/breaker_days.conf.in",
    { ROOT = ROOT, PORT = port, UP = up }, 260,
    function() return get("/ping") and true end)
  if not check(ok, "nginx with 4 workers starts on 127.0.0.1", err) then
    return
  end
  for _, day in ipairs { outage_day, flapping_day, repeated_day } do
    local fine, e = pcall(day)
    check(fine, "the day ran without a Lua error", e)
  end
  H.stop_nginx(PREFIX)
  local bad = H.errors_logged(PREFIX)
  check(#bad == 0, "nginx logged no error", table.concat(bad, "\n"))
end

main()
tap.plan()
