-- backoff.fleet against a real redis-server and four real nginx hosts
-- (two workers each) on 127.0.0.1: the fleet opens by quorum, a host
-- that saw no failure follows within one sync, one prober for the
-- fleet, one host's broken path stays its own, and Redis paused
-- (SIGSTOP), killed, restarted empty or poisoned never delays a request
-- nor raises a Lua error; a budget sees the fleet (fl:budget): a host
-- that saw no retry succeed borrows from those that did; and idle
-- hosts' stale votes neither reopen the fleet nor hold its probes.
-- Everything runs under `timeout` and is stopped by pid.  TAP.
--   lua5.4 spec/nginx/fleet_redis.lua ROOT
local socket = require "socket"

local ROOT = assert(arg[1], "usage: fleet_redis.lua ROOT")
local H = dofile(ROOT .. "/spec/nginx/harness.lua")
local BASE = ROOT .. "/build/nginx-fleet-redis"
local INTERVAL = 0.5                 -- fleet_redis_app.lua's

local tap = H.tap(os.getenv("VERBOSE"))
local check = tap.check
local now = socket.gettime

------------------------------------------------------------------------
-- redis-server, on a port of its own, no persistence

-- a password for the default user, and an ACL user for host 4: neither
-- may appear in any log
math.randomseed(os.time())
local REDIS = { port = H.free_port(),
  pass = ("pw%d"):format(math.random(1e6, 9e6)),
  user = "gw", user_pass = ("up%d"):format(math.random(1e6, 9e6)) }

local function redis_cli(args)
  local p = io.popen(("timeout 5 redis-cli -p %d -a %s --no-auth-warning "
    .. "%s 2>&1"):format(REDIS.port, REDIS.pass, args))
  local out = p:read("*a")
  p:close()
  return out
end

local function redis_start()
  H.sh(("mkdir -p '%s' && timeout 170 redis-server --port %d --bind "
    .. "127.0.0.1 --save '' --appendonly no --requirepass %s "
    .. ">>'%s/redis.log' 2>&1 &"):format(BASE, REDIS.port, REDIS.pass,
    BASE))
  for _ = 1, 100 do
    local pid = redis_cli("INFO server"):match("process_id:(%d+)")
    if pid then
      REDIS.pid = pid
      redis_cli(("ACL SETUSER %s on '>%s' '~*' '+@all'"):format(REDIS.user,
        REDIS.user_pass))
      return true
    end
    socket.sleep(0.05)
  end
  return false
end

local function redis_signal(sig)
  if REDIS.pid then H.sh("kill -" .. sig .. " " .. REDIS.pid
                         .. " 2>/dev/null") end
end

------------------------------------------------------------------------
-- the upstream and the hosts

local UP, BAD = H.free_port(), H.free_port()
local hosts = {}

local function up(path) return H.get(UP, path, 5) end

local function start_all()
  local ok, err = H.start_nginx(BASE .. "/up",
    ROOT .. "/spec/nginx/fleet_redis_up.conf.in",
    { ROOT = ROOT, UP = UP, BAD = BAD }, 170,
    function() return up("/mode?dead=0") end)
  if not ok then return nil, err end
  for i = 1, 4 do
    local port = H.free_port()
    hosts[i] = { port = port, prefix = BASE .. "/h" .. i }
    ok, err = H.start_nginx(hosts[i].prefix,
      ROOT .. "/spec/nginx/fleet_redis.conf.in",
      { ROOT = ROOT, PORT = port, HOST = "h" .. i, REDIS = REDIS.port,
        UP = UP, BAD = BAD,
        USER = i == 4 and ('"' .. REDIS.user .. '"') or "nil",
        PASSWORD = '"' .. (i == 4 and REDIS.user_pass or REDIS.pass)
                   .. '"' }, 170,
      function() return H.get(port, "/state", 5) end)
    if not ok then return nil, err end
  end
  return true
end

local function stop_all()
  for _, h in ipairs(hosts) do H.stop_nginx(h.prefix) end
  H.stop_nginx(BASE .. "/up")
  redis_signal("CONT")
  redis_signal("KILL")
end

-- a call through host i's guarded breaker: its answer and seconds
-- (kept in `lat` when it is a table)
local slowest, lat = 0, nil
local fault_time = 0           -- seconds Redis was down or paused
local function call(i)
  local t0 = now()
  local body = H.get(hosts[i].port, "/call", 5)
  local dt = now() - t0
  if dt > slowest then slowest = dt end
  if lat then lat[#lat + 1] = dt end
  return (body or ""):match("%S+") or "none", dt
end

local function state(i)
  return H.fields(H.get(hosts[i].port, "/state", 5), " \n")
end

-- every host's own state and fleet's word, for messages
local function all_states()
  local out = {}
  for i = 1, 4 do
    local st = state(i)
    out[i] = ("h%d own=%s fleet=%s"):format(i, st.own, st.fleet)
  end
  return table.concat(out, ", ")
end

-- polls f every 50 ms (calls to hosts keep going through `load`) until
-- it is true or `limit` seconds passed: the seconds it took, or nil
local function within(limit, f, load)
  local t0 = now()
  repeat
    if load then load() end
    if f() then return now() - t0 end
    socket.sleep(0.05)
  until now() - t0 > limit
  return nil
end

-- calls to every host but `skip`, answering none "refused"
local function refusals(n, skip)
  local r = 0
  for _ = 1, n do
    for i = 1, 4 do
      if i ~= skip and call(i) == "refused" then r = r + 1 end
    end
  end
  return r
end

-- one call to each host: true when all four answered 200
local function all_fine()
  local n = 0
  for i = 1, 4 do if call(i) == "200" then n = n + 1 end end
  return n == 4
end

local function trip(i)
  for _ = 1, 6 do
    if call(i) == "refused" then return true end
  end
  return false
end

------------------------------------------------------------------------
-- the checks

-- hosts 1-3 hear of retries that succeeded; host 4 hears of nothing,
-- and within a few syncs its budget may retry on the fleet's grant
local function budget_sees_fleet()
  local function grant(i)
    return tonumber(H.fields(H.get(hosts[i].port, "/budget", 5),
                             " \n").grant) or -1
  end
  local function feed()
    for i = 1, 3 do H.get(hosts[i].port, "/saved?n=3", 5) end
  end
  check(grant(4) == 0, "budgets: no grant before the fleet saw a retry "
        .. "succeed", grant(4))
  local took = within(4 * INTERVAL + 1, function() return grant(4) >= 1 end,
                      feed)
  check(took, "budgets: host 4, which heard of no retry, gets the "
        .. "fleet's grant within a few syncs",
        ("%.2f s, grant %s"):format(took or -1, grant(4)))
  local sp = H.fields(H.get(hosts[4].port, "/spend", 5), " \n")
  check(tonumber(sp.own) and tonumber(sp.lent) and tonumber(sp.lent) >= 1
        and tonumber(sp.lent) <= 8,
        "budgets: host 4 retries past its own budget on the grant (at "
        .. "most its capacity, 8)", ("own %s lent %s"):format(sp.own,
        sp.lent))
  check(redis_cli("--scan --pattern 't:g:api:*'"):find("t:g:api:y:", 1,
        true), "budgets: the fleet's counts are in Redis under "
        .. "P g:api:x:<b> and P g:api:y:<b>")
  local gone = within(4 * INTERVAL + 1, function() return grant(4) == 0 end)
  check(gone, "budgets: no retry saved any more: the grant is gone "
        .. "within a few syncs", ("%.2f s"):format(gone or -1))
end

local function checks()
  local synced = within(5, function()
    for i = 1, 4 do if state(i).hosts ~= "4" then return false end end
    return true
  end)
  check(synced, "the four hosts sync through Redis (each sees 4 hosts)")
  budget_sees_fleet()

  -- one host's own broken path: it protects itself, no one else refuses
  H.get(hosts[1].port, "/path?broken=1", 5)
  check(trip(1), "host 1, its own path broken, opens its own breaker")
  socket.sleep(3 * INTERVAL)
  check(refusals(10, 1) == 0 and
        state(2).fleet == "none",
        "the other hosts never refuse because of host 1 (no quorum)",
        "fleet at host 2: " .. tostring(state(2).fleet))
  H.get(hosts[1].port, "/path?broken=0", 5)
  check(within(4, function() return call(1) == "200" end),
        "host 1 recovers by itself when its path is fixed")

  -- a dead upstream seen by two hosts: the fleet opens by quorum
  up("/mode?dead=1")
  trip(1)
  trip(2)
  local t_open = now()
  local mark0 = #H.read_file(BASE .. "/up/logs/upstream.log")
  local took = within(4, function() return state(3).fleet == "open" end)
  check(took and took <= 2 * INTERVAL + 0.3 and call(3) == "refused",
    "host 3, which saw no failure, refuses within one sync of the "
    .. "fleet opening (two intervals of the vote)",
    ("%.2f s after the second host opened"):format(took or -1))
  check(within(INTERVAL + 0.3, function() return state(4).fleet == "open"
    end) and call(4) == "refused", "host 4 follows the fleet too")
  local seen = H.read_file(BASE .. "/up/logs/upstream.log"):sub(mark0 + 1)
  check(not seen:find(" h3 0 ") and not seen:find(" h4 0 "),
    "hosts 3 and 4 sent nothing but the fleet's probes to the dead "
    .. "upstream", seen)

  -- while the fleet is open: probes for the whole fleet
  local mark = #H.read_file(BASE .. "/up/logs/upstream.log")
  local t_dead = now()
  while now() - t_dead < 6 do
    for i = 1, 4 do call(i) end
    socket.sleep(0.05)
  end
  local log = H.read_file(BASE .. "/up/logs/upstream.log"):sub(mark + 1)
  local probes, by_host, others = 0, {}, 0
  for _, host, probe in log:gmatch("(%S+) (%S+) (%S+) %d+") do
    if probe == "1" then
      probes = probes + 1
      by_host[host] = (by_host[host] or 0) + 1
    else
      others = others + 1
    end
  end
  check(probes >= 2 and probes <= 10 and others == 0,
    "6 s of a dead upstream: the fleet probes about once a second (one "
    .. "prober at a time, a new one every tenure of 1.5 s), not once per "
    .. "host and interval",
    ("probes %d (h1 %s h2 %s h3 %s h4 %s), other requests %d; alone each "
     .. "voting host probes 6 times"):format(probes, tostring(by_host.h1),
     tostring(by_host.h2), tostring(by_host.h3), tostring(by_host.h4),
     others))

  -- recovery
  up("/mode?dead=0")
  local back = within(6, all_fine)
  check(back, "the upstream back: every host answers 200 again",
        ("%.2f s (%.2f s since the fleet opened)"):format(back or -1,
        now() - t_open))

  return t_open
end

-- the probes in the upstream's log since byte `mark`, by host
local function probes_since(mark)
  local log = H.read_file(BASE .. "/up/logs/upstream.log"):sub(mark + 1)
  local by_host = {}
  for _, host, probe in log:gmatch("(%S+) (%S+) (%S+) %d+") do
    if probe == "1" then by_host[host] = (by_host[host] or 0) + 1 end
  end
  return by_host
end

-- hosts 1 and 2 open on their own and then get no request: their votes
-- go stale (a failure in the last suspect_window, 1 s), and without
-- demand neither campaigns for prober; hosts 3 and 4, which keep
-- calling, probe, are back within 2 s of the upstream's return, and the
-- stale breakers of 1 and 2 never reopen the fleet
local function idle_voters()
  up("/mode?dead=1")
  trip(1)
  trip(2)
  local function load() call(3) call(4) end
  local opened = within(4, function()
    local f = state(3).fleet
    return f == "open" or f == "probe"
  end, load)
  check(opened, "idle voters: the fleet opens by their quorum",
        all_states())
  local mark = #H.read_file(BASE .. "/up/logs/upstream.log")
  local t0 = now()
  while now() - t0 < 3 do load() socket.sleep(0.05) end
  local by = probes_since(mark)
  check(not by.h1 and not by.h2 and ((by.h3 or 0) + (by.h4 or 0)) >= 1,
    "idle voters: only hosts with requests probe for the fleet",
    ("h1 %s h2 %s h3 %s h4 %s"):format(tostring(by.h1), tostring(by.h2),
     tostring(by.h3), tostring(by.h4)))
  up("/mode?dead=0")
  local back = within(4, function()
    return call(3) == "200" and call(4) == "200" end)
  check(back and back <= 2, "idle voters: hosts 3 and 4 answer 200 "
    .. "within 2 s of the upstream's return (one probe, then one "
    .. "open_interval)", ("%.2f s"):format(back or -1))
  local r = 0
  t0 = now()
  while now() - t0 < 4 do
    if call(3) == "refused" then r = r + 1 end
    if call(4) == "refused" then r = r + 1 end
    socket.sleep(0.05)
  end
  local own1 = state(1).own
  check(r == 0 and own1 ~= "closed", "idle voters: 4 s after, hosts 1 "
    .. "and 2 still idle (their breakers not closed), no refusal at 3 "
    .. "and 4: stale votes do not reopen the fleet",
    ("%d refused; %s"):format(r, all_states()))
  check(within(4, all_fine), "idle voters: every host answers 200 again")
end

-- Redis fails while the fleet is open: host 3 (no vote) goes back to
-- its own state (closed) and every request stays fast
local function faults()
  up("/mode?dead=1")
  trip(1)
  trip(2)
  local function fleet_word(i)
    local f = state(i).fleet
    return f == "open" or f == "probe"      -- host 3 may be the prober
  end
  -- hosts 1 and 2 keep calling: a vote needs a failure in the last
  -- suspect_window (their own half-open probes give them)
  local open = within(4, function() return fleet_word(3) end,
                      function() call(1) call(2) end)
  check(open, "faults: the fleet open again before each fault",
        all_states() .. "; " .. redis_cli("--scan"))

  -- calls to every host for `s` seconds: their 99th percentile
  local function p99(s)
    lat = {}
    local t0 = now()
    while now() - t0 < s do
      for i = 1, 4 do call(i) end
      socket.sleep(0.02)
    end
    table.sort(lat)
    local v = lat[math.max(1, math.ceil(#lat * 0.99))]
    lat = nil
    return v
  end

  local function fault(what, breakit, mendit, back_within, hold)
    local base = p99(2)
    slowest = 0
    local t0 = now()
    breakit()
    local own = within(3 * INTERVAL + 1.5,
      function() return state(3).fleet == "none" end,
      function() call(4) end)
    check(own, what .. ": host 3 back on its own state",
          ("%.2f s"):format(own or -1))
    local during = p99(hold - (now() - t0))
    check(during <= math.max(2 * base, base + 0.005), what .. ": the "
      .. "99th percentile of calls to every host during the fault is "
      .. "that of Redis answering (within noise)",
      ("%.1f ms during %.0f s, %.1f ms before"):format(during * 1000,
      now() - t0, base * 1000))
    mendit()
    fault_time = fault_time + (now() - t0)
    local fl = within(back_within,
      function() return fleet_word(3) end,
      function() call(4) end)
    check(fl, what .. ": host 3 back on the fleet's state",
          ("%.2f s after Redis came back"):format(fl or -1))
    check(slowest < 0.25, what .. ": no request slowed by Redis",
          ("slowest %.3f s"):format(slowest))
  end

  fault("Redis paused (SIGSTOP) for 30 s",
        function() redis_signal("STOP") end,
        function() redis_signal("CONT") end, 3, 30)
  fault("Redis killed, then restarted empty",
        function() redis_signal("KILL") socket.sleep(0.2) end,
        function() redis_start() end, 4, 3)

  -- poison: wrong types and keys without expiry under the fleet's names
  up("/mode?dead=0")
  local healed = within(8, all_fine)
  check(healed, "the upstream back after the faults: every host answers "
        .. "200 again", ("%.2f s; "):format(healed or -1) .. all_states())
  -- the fleet's closing marker (3 intervals) gone, and every vote with
  -- it: a foreign value over our own marker would delete it, and votes
  -- not yet withdrawn could reopen the fleet for one interval
  socket.sleep(4 * INTERVAL)
  redis_cli([[EVAL "local t = redis.call('TIME') ]]
    .. [[local b = math.floor((t[1] * 1000 + math.floor(t[2] / 1000)) / 500) ]]
    .. [[for d = 0, 4 do for i = 1, 9 do ]]
    .. [[redis.call('SADD', 't:b:up:v:' .. (b + d), 'evil' .. i) end ]]
    .. [[redis.call('SET', 't:h:' .. (b + d), 'x') end ]]
    .. [[redis.call('SET', 't:b:up:p', 'evil') ]]
    .. [[redis.call('SET', 't:b:up:c', 'evil') return b" 0]])
  slowest = 0
  local r = 0
  local t0 = now()
  local why = {}
  while now() - t0 < 2.5 do
    for i = 1, 4 do
      if call(i) == "refused" then
        r = r + 1
        if #why < 4 then
          local st = state(i)
          why[#why + 1] = ("h%d own=%s fleet=%s at %.2f s"):format(i,
            st.own, st.fleet, now() - t0)
        end
      end
    end
    socket.sleep(0.05)
  end
  check(r == 0, "foreign values in Redis: no host refuses",
        r .. " " .. table.concat(why, ", "))
  local logged = 0
  for i = 1, 4 do
    local text = H.read_file(hosts[i].prefix .. "/logs/error.log")
    for _ in text:gmatch("foreign value under Redis key") do
      logged = logged + 1
    end
  end
  check(logged >= 1 and redis_cli("TTL t:b:up:p"):match("%-2"),
        "foreign values in Redis: deleted and logged",
        ("%d lines"):format(logged))
  check(slowest < 0.25, "foreign values: no request slowed",
        ("slowest %.3f s"):format(slowest))
end

local function finish()
  local errs, rpc = {}, 0
  for i = 1, 4 do
    for _, line in ipairs(H.errors_logged(hosts[i].prefix)) do
      errs[#errs + 1] = line
    end
    rpc = rpc + tonumber(state(i).rpc or 1)
  end
  check(rpc == 0, "no Redis call from a request phase", rpc)
  local leaked = {}
  for i = 1, 4 do
    local text = H.read_file(hosts[i].prefix .. "/logs/error.log")
    if text:find(REDIS.pass, 1, true)
       or text:find(REDIS.user_pass, 1, true) then
      leaked[#leaked + 1] = "h" .. i
    end
  end
  check(#leaked == 0, "Redis' password (and the ACL user's) is in no "
        .. "log (hosts 1-3 AUTH with a password, host 4 as an ACL user)",
        table.concat(leaked, " "))
  check(#errs == 0, "no Lua error (nothing at error or worse) on any host",
        table.concat(errs, "\n"))
  local warns = 0
  for line in H.read_file(hosts[3].prefix .. "/logs/error.log")
                :gmatch("[^\n]+") do
    if line:find("Redis at", 1, true) then warns = warns + 1 end
  end
  check(warns >= 1 and warns <= fault_time / INTERVAL + 4, "Redis' "
        .. "faults said at warn, at most once per interval",
        ("%d lines on host 3 in %.1f s of faults"):format(warns,
        fault_time))
end

local ok = redis_start()
check(ok, "redis-server starts on 127.0.0.1:" .. REDIS.port)
local started, err = start_all()
check(started, "the upstream and four nginx hosts start", err)
if ok and started then
  local fine, e = pcall(function()
    checks()
    idle_voters()
    faults()
    finish()
  end)
  check(fine, "the suite ran to its end", e)
end
stop_all()
tap.plan()
