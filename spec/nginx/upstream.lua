-- One backoff.upstream declared from a plain table in a real nginx
-- (Debian's nginx + libnginx-mod-http-lua, 2 workers), four peers in the
-- same nginx on other ports, reached three ways: proxy_pass through
-- up:balancer() and up:log(), up:request() (a cosocket client, hedged)
-- and up:call().  One peer dies (closes every connection unanswered),
-- then comes back:
--   * every request answers 200 throughout, as if there were 3 peers;
--   * once the dead peer's breaker is open, under 2% of the tries that
--     reach a peer reach it while it is dead (counted by the peers);
--   * it serves again within 2 s of its return;
--   * the status page loads in headless Chromium (Debian's package) and
--     shows each peer and its state; the JSON parses (python3);
--     /metrics parses with prometheus_client, the families labelled by
--     upstream and peer;
--   * nothing at error or worse in the log but the dead peer's closes.
-- Bounded: at most 20,000 requests and about 40 s; nginx runs under
-- `timeout`, on free ports of 127.0.0.1, and is stopped by its pid.  TAP.
--   lua5.4 spec/nginx/upstream.lua ROOT
local ROOT = assert(arg[1], "usage: upstream.lua ROOT")
local H = dofile(ROOT .. "/spec/nginx/harness.lua")
local socket = require "socket"
local PREFIX = ROOT .. "/build/nginx-upstream"
local PYTHON = os.getenv("PYTHON") or "/usr/bin/python3"
local CHROMIUM = os.getenv("CHROMIUM") or "chromium"
local MAX_REQUESTS = 20000

local tap = H.tap(os.getenv("VERBOSE"))
local check = tap.check

local port, ports
local sent = 0
local function get(path) return H.get(port, path, 15) end

-- one request through the upstream, by turns through each door
local DOORS = { "/b/", "/b/", "/c/", "/f/" }
local bad = {}
local function request()
  sent = sent + 1
  assert(sent <= MAX_REQUESTS, "request bound reached")
  local path = DOORS[sent % #DOORS + 1] .. sent
  local body, status = get(path)
  if status ~= 200 and #bad < 10 then
    bad[#bad + 1] = path .. ": " .. tostring(status) .. " "
      .. tostring(body)
  end
  return status == 200
end

local function hits()
  local t = {}
  for k, v in (get("/hits") or ""):gmatch("(%w+)=(%d+)") do
    t[k] = tonumber(v)
  end
  return t
end

local function json(text)
  local f = assert(io.open(PREFIX .. "/status.json", "w"))
  f:write(text or "")
  f:close()
  local p = assert(io.popen(PYTHON .. [[ -c 'import json,sys
d = json.load(open(sys.argv[1]))
for u in d["upstreams"]:
    for p in u["peers"]:
        print(u["name"], p["peer"], p["state"])' ]] .. PREFIX
    .. "/status.json 2>&1"))
  local out = p:read("*a")
  p:close()
  return out
end

-- the dead peer's state in the JSON status
local function state_of(peer)
  local out = json(get("/status?json"))
  return out:match("api 127%.0%.0%.1:" .. peer .. " (%S+)"), out
end

local function run(n, ok_so_far)
  local ok = ok_so_far
  for _ = 1, n do ok = request() and ok end
  return ok
end

local function test()
  local a = ports[1]
  check(run(200, true), "200 requests through the three doors answer 200",
        table.concat(bad, "\n"))
  local h = hits()
  local all = true
  for _, p in ipairs(ports) do all = all and (h["served" .. p] or 0) > 10 end
  check(all, "each of the 4 peers served", get("/hits"))

  get("/ctl?dead=" .. a)
  local ok, state = true, nil
  for _ = 1, 100 do
    ok = run(10, ok)
    state = state_of(a)
    if state ~= "closed" then break end
  end
  check(state == "open" or state == "half_open",
    "the dead peer's breaker opens", state)

  -- while it is dead: 3 s of requests
  local before, t0, n0 = hits(), socket.gettime(), sent
  while socket.gettime() - t0 < 3 and sent - n0 < 8000 do
    ok = run(10, ok)
  end
  local after = hits()
  local total, dead = 0, (after["hits" .. a] or 0) - (before["hits" .. a] or 0)
  for _, p in ipairs(ports) do
    total = total + (after["hits" .. p] or 0) - (before["hits" .. p] or 0)
  end
  local share = dead / math.max(total, 1)
  check(share < 0.02, ("under 2%% of the tries reach the dead peer once "
    .. "its breaker is open: %d of %d (%.2f%%, %d requests in %.1f s)")
    :format(dead, total, share * 100, sent - n0, socket.gettime() - t0))
  check(ok, "every request answered 200 while a peer was dead",
    table.concat(bad, "\n"))

  -- back: how soon does it serve again?
  local served0 = hits()["served" .. a] or 0
  get("/ctl?alive=" .. a)
  local back = socket.gettime()
  local took
  while socket.gettime() - back < 5 do
    ok = run(5, ok)
    if (hits()["served" .. a] or 0) > served0 then
      took = socket.gettime() - back
      break
    end
  end
  check(took and took < 2, ("the peer serves again within 2 s of its "
    .. "return (%s s)"):format(took and ("%.2f"):format(took) or "never"))
  ok = run(200, ok)
  local h2 = hits()
  check((h2["served" .. a] or 0) - served0 >= 20,
    "it takes its share again", get("/hits"))
  check(ok, "every request answered 200", table.concat(bad, "\n"))
end

local function page()
  local home = PREFIX .. "/chromium"
  H.sh("mkdir -p '" .. home .. "'")
  local p = assert(io.popen(("HOME='%s' timeout 60 %s --headless "
    .. "--no-sandbox --disable-gpu --user-data-dir='%s' --dump-dom "
    .. "http://127.0.0.1:%d/status 2>/dev/null"):format(home, CHROMIUM,
    home, port)))
  local dom = p:read("*a")
  p:close()
  local ok = dom:find("<h2>api</h2>", 1, true) ~= nil
  for _, q in ipairs(ports) do
    ok = ok and dom:match('data%-peer="127%.0%.0%.1:' .. q
      .. '"><td>[^<]+</td><td class="state">closed</td>') ~= nil
  end
  check(ok, "the status page, in headless Chromium, shows each peer "
    .. "closed", dom:sub(1, 2000))
  local out = json(get("/status?json"))
  local n = 0
  for _ in out:gmatch("api 127%.0%.0%.1:%d+ %l+") do n = n + 1 end
  check(n == 4, "the JSON status parses (python3): 4 peers", out)
  local f = assert(io.open(PREFIX .. "/metrics.txt", "w"))
  f:write(get("/metrics") or "")
  f:close()
  local pp = assert(io.popen(PYTHON .. " " .. ROOT
    .. "/spec/nginx/prom_parse.py <" .. PREFIX .. "/metrics.txt 2>&1"))
  local parsed = pp:read("*a")
  pp:close()
  local hex = ("127.0.0.1:" .. ports[1]):gsub(".", function(c)
    return ("%02x"):format(c:byte()) end)
  check(parsed:find("sample backoff_upstream_peer_state peer=" .. hex
    .. ",upstream=617069 0.0", 1, true) ~= nil
    and parsed:find("sample backoff_upstream_tries_total outcome="
      .. "6661696c757265,peer=" .. hex, 1, true) ~= nil
    and parsed:find("sample backoff_attempts_total name=617069", 1, true)
      ~= nil,
    "/metrics parses with prometheus_client, labelled by upstream and "
    .. "peer", parsed)
end

local ok, err = pcall(function()
  port = H.free_port()
  ports = { H.free_port(), H.free_port(), H.free_port(), H.free_port() }
  local pid, e = H.start_nginx(PREFIX, ROOT .. "/spec/nginx/upstream.conf.in",
    { ROOT = ROOT, PORT = port, PA = ports[1], PB = ports[2],
      PC = ports[3], PD = ports[4] }, 90, function()
      local body = H.get(port, "/ping", 5)
      return body and tonumber(body:match("%d+"))
    end)
  if not pid then error("nginx did not start:\n" .. e) end
  test()
  page()
end)
H.stop_nginx(PREFIX)
check(ok, "the run ended", err)
local logged = H.errors_logged(PREFIX, "upstream prematurely closed")
check(#logged == 0, "nothing at error or worse in the log but the dead "
  .. "peer's closes", table.concat(logged, "\n"))
tap.plan()
