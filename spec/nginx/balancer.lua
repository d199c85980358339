-- backoff.balancer under load in a real nginx (2 workers; Debian's nginx
-- + libnginx-mod-http-lua): 200 requests in flight at once against a
-- peer that hangs, one that answers 503 and one that closes, on
-- 127.0.0.1.  Checks, from the peers' own access logs and the gateway's:
-- tries per request never beyond proxy_next_upstream_tries or
-- max_attempts, no request past its 1 s deadline by more than 10 ms,
-- every failing request answered with the caller's 502 (never 500), and
-- a client abort paying nothing it did not use.  With two `server`
-- lines in the upstream block (nginx's own tries): every failing
-- request still answers 502, and the budget's bound holds: retries made
-- (the peers' logs, /metrics) are exactly those the budget was paid for
-- and kept (a token bucket of 100, the recommended budget; the hanging
-- and the 503 peer).  nginx runs under `timeout`, is stopped by its pid;
-- the load is bounded (6,400 requests, 60 s each run).  TAP.
--   lua5.4 spec/nginx/balancer.lua ROOT
local socket = require "socket"

local ROOT = assert(arg[1], "usage: balancer.lua ROOT")
local H = dofile(ROOT .. "/spec/nginx/harness.lua")
local PREFIX = ROOT .. "/build/nginx-balancer"
local CONCURRENCY = 200
local DEADLINE = 1              -- the policy's max_actual_duration
local MAX_ATTEMPTS = 4

local tap = H.tap(os.getenv("VERBOSE"))
local check = tap.check
local now = socket.gettime

local function get(port, path) return H.get(port, path, 15) end

------------------------------------------------------------------------
-- the load: `total` GETs of path, `concurrency` in flight at once;
-- returns the statuses answered, or nil and why

local function load(port, path, total, concurrency, limit)
  local t_end = now() + limit
  local active, n_active, started = {}, 0, 0
  local statuses = {}
  local function open()
    local c = socket.tcp()
    c:settimeout(2)
    local ok, err = c:connect("127.0.0.1", port)
    if ok then
      ok, err = c:send("GET " .. path
        .. " HTTP/1.0\r\nHost: localhost\r\n\r\n")
    end
    if not ok then c:close() return nil, err end
    c:settimeout(0)
    return c
  end
  local function finish(err)
    for c in pairs(active) do c:close() end
    return (not err) and statuses or nil, err
  end
  while #statuses < total do
    if now() > t_end then
      return finish(("not done after %d s: %d of %d answered"):format(
        limit, #statuses, total))
    end
    while started < total and n_active < concurrency do
      local c, err = open()
      if not c then return finish("connect: " .. tostring(err)) end
      active[c] = { parts = {}, at = now() }
      n_active, started = n_active + 1, started + 1
    end
    local set = {}
    for c in pairs(active) do set[#set + 1] = c end
    for _, c in ipairs((socket.select(set, nil, 0.01))) do
      local st = active[c]
      local data, err, partial = c:receive(65536)
      st.parts[#st.parts + 1] = data or partial
      if err and err ~= "timeout" then
        c:close()
        active[c], n_active = nil, n_active - 1
        local all = table.concat(st.parts)
        statuses[#statuses + 1] = tonumber(all:match("^HTTP/%d%.%d (%d+)"))
                                  or 0
      end
    end
    for _, st in pairs(active) do
      if now() - st.at > 10 then return finish("no answer after 10 s") end
    end
  end
  return finish(nil)
end

------------------------------------------------------------------------
-- the logs

local function lines(name)
  return H.read_file(PREFIX .. "/logs/" .. name):gmatch("[^\n]+")
end

-- request id -> tries, as the peers logged them
local function tries_by_peers()
  local t = {}
  for _, peer in ipairs { "hang", "fail", "close", "mixed" } do
    for line in lines(peer .. ".log") do
      local id = line:match("^(%x+) ")
      if id then t[id] = (t[id] or 0) + 1 end
    end
  end
  return t
end

-- request id -> the status of its last try, as a peer logged it
local function last_status(peer)
  local t = {}
  for line in lines(peer .. ".log") do
    local id, status = line:match("^(%x+) (%d+)")
    if id then t[id] = tonumber(status) end
  end
  return t
end

-- the gateway's requests of one route: id, status, time, tries (from
-- $upstream_addr)
local function gateway(uri)
  local t = {}
  for line in lines("gateway.log") do
    local id, status, rt, u, addrs, ups = line:match(
      '^(%x+) (%d+) ([%d.]+) (%S+) "([^"]*)" "([^"]*)"$')
    if u == uri then
      local n = 0
      for _ in addrs:gmatch("[^,]+") do n = n + 1 end
      t[#t + 1] = { id = id, status = tonumber(status),
        time = tonumber(rt), tries = n, upstream = ups }
    end
  end
  return t
end

local function counts(port)
  local c = {}
  for line in (get(port, "/counts") or ""):gmatch("[^\n]+") do
    local r, a, s, g = line:match("^(%w+) attempts=(%d+) successes=(%d+) "
                                  .. "giveups=(%S*)$")
    if r then
      c[r] = { attempts = tonumber(a), successes = tonumber(s),
               giveups = g }
    end
    local tokens = line:match("^tokens=(%d+)")
    if tokens then c.tokens = tonumber(tokens) end
  end
  return c
end

local function quantile(sorted, q)
  if #sorted == 0 then return 0 / 0 end
  return sorted[math.max(1, math.ceil(q * #sorted))]
end

------------------------------------------------------------------------

local RUNS = {
  -- route, requests, the tries each request must make (min, max), why
  { "/hang", 400, MAX_ATTEMPTS, MAX_ATTEMPTS, "max_attempts (4)" },
  { "/hang10", 400, 2, 9, "the deadline" },
  { "/fail", 800, MAX_ATTEMPTS, MAX_ATTEMPTS, "max_attempts (4)" },
  { "/fail3", 800, 3, 3, "proxy_next_upstream_tries (3)" },
  { "/close", 400, MAX_ATTEMPTS, MAX_ATTEMPTS, "max_attempts (4)" },
}

local function load_checks(port)
  for _, run in ipairs(RUNS) do
    local uri, total, lo, hi, why = run[1], run[2], run[3], run[4], run[5]
    local t0 = now()
    local statuses, err = load(port, uri, total, CONCURRENCY, 60)
    local took = now() - t0
    if not check(statuses ~= nil, ("%s: %d requests, %d in flight, all "
        .. "answered"):format(uri, total, CONCURRENCY), err) then
      return
    end
    socket.sleep(0.3)                 -- the peers log aborted tries late
    local peers, reqs = tries_by_peers(), gateway(uri)
    local bad_tries, over, answers, times = {}, {}, {}, {}
    local min_t, max_t, sum_t = math.huge, 0, 0
    for _, r in ipairs(reqs) do
      local n = peers[r.id] or 0
      min_t, max_t, sum_t = math.min(min_t, n), math.max(max_t, n),
                            sum_t + n
      if n < lo or n > hi or n ~= r.tries then
        bad_tries[#bad_tries + 1] = ("%s: %d tries seen by the peers, %d "
          .. "by the gateway (%s)"):format(r.id, n, r.tries, r.upstream)
      end
      answers[r.status] = (answers[r.status] or 0) + 1
      times[#times + 1] = r.time
      if r.time > DEADLINE + 0.010 then over[#over + 1] = r.time end
    end
    table.sort(times)
    local shown = {}
    for s, k in pairs(answers) do shown[#shown + 1] = s .. " x" .. k end
    local client = {}
    for _, s in ipairs(statuses) do client[s] = (client[s] or 0) + 1 end
    print(("# %s: %d requests in %.1f s; tries per request %d..%d (mean "
      .. "%.2f); request time p50 %.3f p99 %.3f max %.3f s; answers %s")
      :format(uri, #reqs, took, min_t, max_t, sum_t / math.max(#reqs, 1),
      quantile(times, 0.5), quantile(times, 0.99), times[#times] or 0,
      table.concat(shown, ", ")))
    check(#reqs == total and #bad_tries == 0, ("%s: every request made "
      .. "%d to %d tries (%s), counted from the peers' access logs")
      :format(uri, lo, hi, why), table.concat(bad_tries, "\n", 1,
      math.min(#bad_tries, 10)))
    check(#over == 0, uri .. ": no request past its 1 s deadline by more "
      .. "than 10 ms", ("%d over, the worst %.3f s"):format(#over,
      times[#times] or 0))
    check(answers[502] == total and client[502] == total,
      uri .. ": every failing request answered the caller's 502, none "
      .. "500", table.concat(shown, ", "))
  end
end

-- the metrics agree with the peers: every try counted once
local function metrics_checks(port)
  local c = counts(port)
  local peers = tries_by_peers()
  local by_route = {}
  for _, run in ipairs(RUNS) do
    local n = 0
    for _, r in ipairs(gateway(run[1])) do n = n + (peers[r.id] or 0) end
    by_route[run[1]:sub(2)] = n
  end
  local shown = {}
  for route, n in pairs(by_route) do
    shown[#shown + 1] = ("%s: %s counted, %d seen"):format(route,
      tostring(c[route] and c[route].attempts), n)
  end
  local detail = table.concat(shown, "; ")
  local ok = true
  for route, n in pairs(by_route) do
    ok = ok and c[route] and c[route].attempts == n
  end
  check(ok, "metrics count every try the peers saw, once", detail)
  check(c.fail and c.fail.giveups == "max_attempts:800"
    and c.fail3 and c.fail3.giveups == "next_upstream_tries:800"
    and c.close and c.close.giveups == "max_attempts:400"
    and c.hang10 and c.hang10.giveups == "max_actual_duration:400",
    "metrics give each failing request's reason",
    ("fail %s; fail3 %s; close %s; hang10 %s"):format(
      c.fail and c.fail.giveups, c.fail3 and c.fail3.giveups,
      c.close and c.close.giveups, c.hang10 and c.hang10.giveups))
end

-- retries made on a route, as the peers saw them: the tries of its
-- requests beyond the first; and the requests whose last try nginx
-- started and the balancer refused (the gateway logs one more try for
-- it than the peers saw: a "502" nginx answered itself)
local function retries_seen(uri)
  local peers, made, refused, bad = tries_by_peers(), 0, 0, {}
  local reqs = gateway(uri)
  for _, r in ipairs(reqs) do
    local n = peers[r.id] or 0
    made = made + math.max(n - 1, 0)
    if r.tries == n + 1 and r.upstream:match("502$") then
      refused = refused + 1
    elseif r.tries ~= n then
      bad[#bad + 1] = ("%s: %d tries seen by the peers, %d by the gateway "
        .. "(%s)"):format(r.id, n, r.tries, r.upstream)
    end
  end
  return made, refused, reqs, bad
end

-- /metrics: the value of backoff_<counter>_total{name="<name>"}
local function metric(port, counter, name)
  local text = get(port, "/metrics") or ""
  return tonumber(text:match("\nbackoff_" .. counter .. '_total{name="'
    .. name .. '"} (%d+)'))
end

local function budgets(port)
  local b = {}
  for line in (get(port, "/budgets") or ""):gmatch("[^\n]+") do
    local r, rest = line:match("^(%S+) (.*)$")
    if r then b[r] = {}
      for k, v in rest:gmatch("(%w+)=(%d+)") do b[r][k] = tonumber(v) end
    end
  end
  return b
end

local function answers_of(reqs, statuses)
  local gw, client, shown = {}, {}, {}
  for _, r in ipairs(reqs) do gw[r.status] = (gw[r.status] or 0) + 1 end
  for _, st in ipairs(statuses) do client[st] = (client[st] or 0) + 1 end
  for st, k in pairs(gw) do shown[#shown + 1] = st .. " x" .. k end
  table.sort(shown)
  return gw, client, table.concat(shown, ", ")
end

-- refused tries, over every route of the natural upstream
local refused_total = 0

-- the configuration people write: two server lines.  Every failing
-- request makes max_attempts tries, then nginx starts one of its own,
-- which the balancer refuses: nginx answers 502 (it answered 500 when
-- the caller's ngx.exit(502) refused it)
local function natural_checks(port)
  local total = 800
  local t0 = now()
  local statuses, err = load(port, "/natural", total, CONCURRENCY, 60)
  if not check(statuses ~= nil, ("/natural (two server lines): %d "
      .. "requests, %d in flight, all answered"):format(total, CONCURRENCY),
      err) then
    return
  end
  local took = now() - t0
  socket.sleep(0.3)
  local made, refused, reqs, bad = retries_seen("/natural")
  refused_total = refused_total + refused
  local gw, client, shown = answers_of(reqs, statuses)
  print(("# /natural: %d requests in %.1f s; %d retries made, %d last "
    .. "tries refused; answers %s"):format(#reqs, took, made, refused,
    shown))
  check(#reqs == total and #bad == 0 and made == total * (MAX_ATTEMPTS - 1)
    and refused == total, "/natural: every request made max_attempts (4) "
    .. "tries, then its fifth, nginx's own, was refused",
    ("%d requests, %d retries, %d refused; %s"):format(#reqs, made,
    refused, table.concat(bad, "\n", 1, math.min(#bad, 10))))
  check(gw[502] == total and client[502] == total,
    "/natural: every failing request answered 502, none 500 (two server "
    .. "lines, the balancer's refusal)", shown)
  local c = counts(port)
  check(c.natural and c.natural.attempts == total * MAX_ATTEMPTS
    and c.natural.giveups == "max_attempts:" .. total,
    "/natural: metrics count the tries made, not the refused one",
    c.natural and ("attempts %d giveups %s"):format(c.natural.attempts,
    c.natural.giveups))
end

-- The budget's bound, two server lines.  Each retry made was paid:
-- granted (withdraw at the grant) or started by nginx and paid then;
-- a grant not used was given back (deposit).  So, no success being
-- seen (each deposit is a give-back), exactly:
--   retries made = paid - given back = (counter before - after) / cost
-- (the counter only moves by withdraw and deposit), and the counter
-- never goes below 0 (token bucket) or capacity - reserve (earned): at
-- most capacity / cost retries in all.
local BUDGET_RUNS = {
  { "/tb_hang", 400, "a token bucket of 100, the hanging peer" },
  { "/tb_fail", 800, "a token bucket of 100, the 503 peer" },
  { "/tb_mixed", 800, "a token bucket of 100, the 503-or-500 peer" },
  { "/rec_hang", 400, "the recommended budget, the hanging peer" },
  { "/rec_fail", 800, "the recommended budget, the 503 peer" },
}

local function budget_checks(port)
  for _, run in ipairs(BUDGET_RUNS) do
    local uri, total, what = run[1], run[2], run[3]
    local name = uri:sub(2)
    local before = budgets(port)[name]
    local t0 = now()
    local statuses, err = load(port, uri, total, CONCURRENCY, 60)
    if not check(statuses ~= nil, ("%s: %d requests, %d in flight, all "
        .. "answered"):format(uri, total, CONCURRENCY), err) then
      return
    end
    local took = now() - t0
    socket.sleep(0.3)
    local after = budgets(port)[name]
    local made, refused, reqs, bad = retries_seen(uri)
    refused_total = refused_total + refused
    local counted = metric(port, "retries", name) or 0
    local gw, client, shown = answers_of(reqs, statuses)
    local spent = (before.counter - after.counter) / after.unit
    local kept = after.paid - after.back
    local most = after.capacity / after.cost
    print(("# %s (%s): %d requests in %.1f s; retries made %d (peers), %d "
      .. "(/metrics); budget paid %d, given back %d, counter %d -> %d "
      .. "(%s spent, at most %d); %d last tries refused; answers %s")
      :format(uri, what, #reqs, took, made, counted, after.paid,
      after.back, before.counter, after.counter, spent, most, refused,
      shown))
    check(#reqs == total and #bad == 0 and made == counted, uri
      .. ": retries made counted alike by the peers and /metrics",
      ("peers %d, /metrics %d; %s"):format(made, counted,
      table.concat(bad, "\n", 1, math.min(#bad, 10))))
    check(made == kept and kept * before.cost == spent and made <= most,
      ("%s: retries made = paid - given back = the budget's spend, at "
      .. "most %d (%s)"):format(uri, most, what),
      ("made %d, paid %d, given back %d, spent %s"):format(made,
      after.paid, after.back, spent))
    if uri == "/tb_mixed" then
      -- a 500 ends a request (not retried): its grant cost nothing (a
      -- retry is paid when it starts); it answers the peer's 500, every
      -- other request 502
      local last, seen, passed = last_status("mixed"), tries_by_peers(), 0
      for _, r in ipairs(reqs) do
        if last[r.id] == 500 and r.tries == seen[r.id] then
          passed = passed + 1
        end
      end
      check(after.back == 0 and gw[500] == passed and client[500] == passed
        and gw[502] == total - passed and client[502] == total - passed,
        uri .. ": nothing paid for a grant not used (a 500 is not "
        .. "retried); the peer's 500 passed on, every other request "
        .. "answered 502", ("given back "
        .. "%d; %d last tries 500; %s"):format(after.back, passed, shown))
    else
      check(gw[502] == total and client[502] == total,
        uri .. ": every failing request answered 502, none 500", shown)
    end
  end
end

-- a client that goes away after `after` seconds
local function abort_after(port, after)
  local c = socket.tcp()
  c:settimeout(5)
  assert(c:connect("127.0.0.1", port))
  assert(c:send("GET /abort HTTP/1.0\r\nHost: localhost\r\n\r\n"))
  socket.sleep(after)
  c:close()
  socket.sleep(0.3)                   -- nginx logs the 499
end

local function abort_checks(port)
  local setup = (get(port, "/abort_setup") or ""):match("tokens=(%d+)")
  abort_after(port, 0.2)              -- during try 1 (its timeout: 0.5 s)
  local c1 = counts(port)
  abort_after(port, 0.62)             -- during try 2 (0.5 to ~0.745 s)
  local c2 = counts(port)
  local aborted = 0
  for _, r in ipairs(gateway("/abort")) do
    if r.status == 499 then aborted = aborted + 1 end
  end
  check(setup == "50" and aborted == 2,
    "two clients closed their requests to /abort (499)",
    ("tokens %s, 499s %d"):format(tostring(setup), aborted))
  check(c1.tokens == 50, "an abort during the first try: its grant given "
    .. "back, nothing deposited", "tokens " .. tostring(c1.tokens))
  check(c2.tokens == 45, "an abort during a retry: its cost paid, its "
    .. "grant given back, nothing deposited", "tokens "
    .. tostring(c2.tokens))
  check(c2.abort and c2.abort.attempts == 3 and c2.abort.successes == 0
    and c2.abort.giveups == "",
    "an abort counts its tries, and neither a success nor a give-up",
    c2.abort and ("attempts %d successes %d giveups '%s'"):format(
      c2.abort.attempts, c2.abort.successes, c2.abort.giveups))
end

local function main()
  local ports = { main = H.free_port(), hang = H.free_port(),
                  fail = H.free_port(), close = H.free_port(),
                  mixed = H.free_port() }
  local ok, err = H.start_nginx(PREFIX,
    ROOT .. "/spec/nginx/balancer.conf.in",
    { ROOT = ROOT, PORT = ports.main, HANG = ports.hang,
      FAIL = ports.fail, CLOSE = ports.close, MIXED = ports.mixed },
    120, function() return get(ports.main, "/ping") and true end)
  if not check(ok, "nginx with 2 workers and the Lua module starts on "
               .. "127.0.0.1", err) then
    return
  end
  for _, f in ipairs { load_checks, metrics_checks, abort_checks,
                       natural_checks, budget_checks } do
    local fine, e = pcall(f, ports.main)
    check(fine, "checks ran without a Lua error", e)
  end
  H.stop_nginx(PREFIX)
  -- what the peers cause on purpose, and nginx's word for each try the
  -- balancer refused
  local bad = H.errors_logged(PREFIX, "upstream timed out")
  local left, no_live = {}, 0
  for _, line in ipairs(bad) do
    if line:match("no live upstreams while connecting to upstream") then
      no_live = no_live + 1
    elseif not line:match("upstream prematurely closed") then
      left[#left + 1] = line
    end
  end
  check(no_live == refused_total and refused_total > 0, "nginx logged "
    .. "\"no live upstreams\" once per refused try, and for nothing else",
    ("%d logged, %d refused"):format(no_live, refused_total))
  check(#left == 0, "nginx logged no other error (none from the "
    .. "balancer)", table.concat(left, "\n", 1, math.min(#left, 10)))
end

main()
tap.plan()
