-- backoff.hedge against a real nginx (Debian's nginx +
-- libnginx-mod-http-lua): an upstream on 127.0.0.1 whose copies answer
-- after the delays asked for, and hedged requests through raw cosockets
-- (a keepalive pool), a lua-resty-http-shaped client and a plain
-- function.  The upstream logs every request it saw and those whose
-- caller closed the connection first (499), so a cancelled copy shows
-- as a request the upstream saw end early; the copies note what they
-- read, and the handler waits past every loser's answer before it
-- reports.  nginx runs under `timeout` and is stopped by its pid.  TAP.
-- Bounded: about 60 upstream requests, 40 s.
--   lua5.4 spec/nginx/hedge.lua ROOT
local ROOT = assert(arg[1], "usage: hedge.lua ROOT")
local H = dofile(ROOT .. "/spec/nginx/harness.lua")
local PREFIX = ROOT .. "/build/nginx-hedge"

local tap = H.tap(os.getenv("VERBOSE"))
local check = tap.check

local function get(port, path) return H.get(port, path, 20) end
local function fields(body) return H.fields(body, "\n") end

local function show(r)
  local keys = {}
  for k in pairs(r) do keys[#keys + 1] = k end
  table.sort(keys)
  local s = {}
  for _, k in ipairs(keys) do s[#s + 1] = k .. "=" .. r[k] end
  return table.concat(s, " ")
end

local n = 0
local function run(port, case)
  n = n + 1
  return fields(get(port, ("/run?case=%s&key=%s%d"):format(case, case, n)))
end

local function num(v) return tonumber(v) or -1 end

------------------------------------------------------------------------

local function cancel_checks(port)
  local r = run(port, "get_hedged")
  check(r.status == "200" and r.body == "copy 2 of get_hedged" .. n
    and num(r.elapsed) < 0.5 and r.hedged == "2:nil",
    "GET: a slow first copy is hedged after the delay; the hedge answers",
    show(r))
  check(r.events == "read 2" and r.hits == "2" and r.closed == "1"
    and num(r.closed_after1) < 0.5,
    "the loser is cancelled at once: its connection closed (the upstream "
    .. "logs 499 early), nothing read after the winner", show(r))

  r = run(port, "resty_shaped")
  check(r.status == "200" and r.body == "copy 2 of resty_shaped" .. n
    and r.events == "read 2" and r.closed == "1"
    and num(r.closed_after1) < 0.5,
    "a lua-resty-http-shaped client: the winner's body read after the "
    .. "hedge returned, the loser closed", show(r))

  r = run(port, "plain")
  check(r.status == "201" and r.events == "read 2,cancel 1"
    and num(r.elapsed) < 0.5,
    "a plain function with a cancel token: the loser's on_cancel ran, it "
    .. "never answered", show(r))

  local body = get(port, "/timer?key=timer" .. n)
  check((body or ""):match("^status=200 body=copy 2 of timer%d+ "
    .. "events=read 2"),
    "hedging from a timer (ngx.timer.at)", body)
end

local function answer_checks(port)
  local r = run(port, "retry_503")
  check(r.status == "200" and r.hits == "2" and r.closed == "0"
    and num(r.elapsed) < 0.5 and r.hedged == "2:HTTP 503",
    "a 503 lets another copy start at once (before the 1 s delay)",
    show(r))

  r = run(port, "fatal_404")
  check(r.status == "404" and r.hits == "2" and r.closed == "1"
    and num(r.elapsed) < 0.5,
    "a hedge's 404 is the answer: returned, the first copy cancelled",
    show(r))

  r = run(port, "deadline")
  check(r.status == "nil" and r.err == "timeout" and r.hits == "3"
    and r.closed == "3" and num(r.closed_after1) < 0.31
    and num(r.closed_after2) < 0.21 and num(r.closed_after3) < 0.11
    and num(r.elapsed) >= 0.29 and num(r.elapsed) < 0.6,
    "each copy's timeouts end at the deadline (0.3 s): the three closed "
    .. "by then", show(r))

  r = run(port, "deadline_plain")
  check(r.status == "nil" and r.reason == "max_actual_duration"
    and r.events == "cancel 3,cancel 2,cancel 1"
    and num(r.elapsed) >= 0.29 and num(r.elapsed) < 0.6,
    "copies that ignore their timeouts are cancelled at the deadline",
    show(r))
end

local function idempotency_checks(port)
  local r = run(port, "post")
  check(r.status == "200" and r.body == "copy 1 of post" .. n
    and r.hits == "1" and r.hedged == "" and r.method == "POST"
    and num(r.elapsed) >= 0.29,
    "a POST is never hedged: one copy, the upstream saw it once", show(r))

  r = run(port, "post_key")
  check(r.status == "200" and r.hits == "2" and r.closed == "1"
    and r.method == "POST",
    "a POST with an Idempotency-Key is hedged", show(r))
end

local function budget_checks(port)
  local r = run(port, "budget")
  local fine = r.status1 == "200" and r.body1 == "copy 2 of budget" .. n
  for i = 2, 5 do
    fine = fine and r["status" .. i] == "200"
      and r["body" .. i] == "copy 1 of budget" .. n
      and r["hedged" .. i] == "" and num(r["elapsed" .. i]) >= 0.29
  end
  check(fine and r.hits == "6" and r.closed == "1",
    "a budget of one hedge: the first request hedges, the next four do "
    .. "not (6 upstream requests for 5)", show(r))
end

local function adaptive_checks(port)
  local r = run(port, "adaptive")
  local d = num(r.delay)
  check(d >= 0.04 and d <= 0.04 * 2 ^ 0.25 * 1.6 and r.samples == "30",
    "the adaptive delay learnt 30 copies of 40 ms: p90 bucket's edge",
    show(r))
  check(r.status == "200" and r.hedged == "2:nil" and r.closed == "1"
    and num(r.elapsed) >= d and num(r.elapsed) < d + 0.4,
    "a slow copy is hedged after the adaptive delay", show(r))
end

local function metrics_checks(port)
  local text = get(port, "/metrics") or ""
  local function sample(family, name)
    return tonumber(text:match(family .. '{name="' .. name .. '"} (%d+)'))
      or 0
  end
  local got = {
    sample("backoff_hedges_total", "get_hedged"),
    sample("backoff_hedges_won_total", "get_hedged"),
    sample("backoff_hedges_cancelled_total", "get_hedged"),
    sample("backoff_hedge_budget_refusals_total", "budget"),
    sample("backoff_hedges_total", "budget"),
    sample("backoff_hedges_total", "post"),
    sample("backoff_attempts_total", "post"),
  }
  check(table.concat(got, " ") == "1 1 1 4 1 0 1",
    "/metrics counts hedges started, won, cancelled and refused",
    table.concat(got, " ") .. "\n" .. text)
  check(text:match("# HELP backoff_hedges_total ")
    and text:match("# TYPE backoff_hedge_budget_refusals_total counter"),
    "/metrics has the hedge families with HELP and TYPE", text)
end

local function never_worse_checks(port)
  local r = run(port, "peers")
  local p1, t1, p2, t2 = (r.events or ""):match(
    "peer 1=(%w+)/(%w+),peer 2=(%w+)/(%w+)")
  check(r.status == "200" and r.body == "copy 2 of peers" .. n
    and p1 and p1 == t1 and p2 == t2 and p1 ~= p2,
    "peers: the hedge goes to another peer than the first copy's "
    .. "(do_request's 4th argument, cancel.peer)", show(r))

  r = run(port, "pushback")
  check(r.status1 == "200" and r.hedged1 == "" and r.status2 == "200"
    and r.body2 == "copy 1 of pushback" .. n and r.hedged2 == ""
    and num(r.elapsed2) >= 0.29 and r.hits == "2",
    "a hedge-pushback-ms answer stops the next request's hedge (a "
    .. "shared hedge.pace)", show(r))
end

local function late_checks(port)
  local _, status = get(port, "/late")
  local r = fields(get(port, "/late_result"))
  for _, phase in ipairs { "filter", "log" } do
    local name = phase == "filter" and "header_filter" or "log"
    check(status == 200 and r[phase .. "ok"] == "false"
      and (r[phase .. "err"] or ""):find("backoff.hedge.request: cannot "
        .. "hedge in nginx's " .. name .. " phase", 1, true),
      "hedging in " .. name .. " raises, naming the phase", show(r))
  end
end

local function main()
  local ports = { main = H.free_port(), up = H.free_port() }
  local ok, err = H.start_nginx(PREFIX, ROOT .. "/spec/nginx/hedge.conf.in",
    { ROOT = ROOT, PORT = ports.main, UP = ports.up },
    100, function() return get(ports.main, "/ping") and true end)
  if not check(ok, "nginx with the Lua module starts on 127.0.0.1", err)
  then
    return
  end
  for _, f in ipairs { cancel_checks, answer_checks, idempotency_checks,
                       budget_checks, adaptive_checks,
                       never_worse_checks, late_checks,
                       metrics_checks } do
    local fine, e = pcall(f, ports.main)
    check(fine, "checks ran without a Lua error", e)
  end
  H.stop_nginx(PREFIX)
  local bad = H.errors_logged(PREFIX)
  check(#bad == 0, "nginx logged no error", table.concat(bad, "\n"))
end

main()
tap.plan()
