-- backoff.http, the runner's phases and backoff.metrics against a real
-- nginx (Debian's nginx + libnginx-mod-http-lua): an upstream on
-- 127.0.0.1 that fails as told, requests retried through
-- ngx.location.capture + proxy_pass and through raw cosockets, /metrics
-- read back by python3-prometheus-client, and retries asked for in
-- header_filter and log, foreign keys under the metrics prefix, and a
-- full lua_shared_dict evicting keys.  nginx runs under `timeout` and is
-- stopped by its pid.  TAP.  Bounded: about 45 requests, 30 s.
--   lua5.4 spec/nginx/http.lua ROOT
local socket = require "socket"

local ROOT = assert(arg[1], "usage: http.lua ROOT")
local H = dofile(ROOT .. "/spec/nginx/harness.lua")
local PREFIX = ROOT .. "/build/nginx-http"
local PYTHON = os.getenv("PYTHON") or "/usr/bin/python3"

local tap = H.tap(os.getenv("VERBOSE"))
local check = tap.check

local function get(port, path) return H.get(port, path, 15) end

local function fields(body) return H.fields(body, "\n") end

local function numbers(list)
  local t = {}
  for x in (list or ""):gmatch("[^,]+") do t[#t + 1] = tonumber(x) end
  return t
end

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

------------------------------------------------------------------------

local function get_checks(port)
  local r = run(port, "get_retry_after_seconds")
  local d = numbers(r.delays)
  check(r.status == "200" and r.attempts == "2" and r.hits == "2"
    and d[1] == 1 and tonumber(r.elapsed) >= 1,
    "GET through capture: a 503 with Retry-After: 1 is retried after 1 s",
    show(r))

  r = run(port, "get_retry_after_date")
  d = numbers(r.delays)
  check(r.status == "200" and r.attempts == "2" and d[1] and d[1] >= 1
    and d[1] <= 2 and tonumber(r.elapsed) >= d[1],
    "GET: a 503 with an HTTP-date Retry-After 2 s ahead waits until then",
    show(r))

  r = run(port, "get_429_x_ratelimit_reset")
  d = numbers(r.delays)
  check(r.status == "200" and r.attempts == "2" and d[1] and d[1] > 1
    and d[1] <= 2,
    "GET: a 429 with X-RateLimit-Reset (a Unix time 2 s ahead) waits "
    .. "until then", show(r))

  r = run(port, "get_429_ratelimit_reset")
  d = numbers(r.delays)
  check(r.status == "200" and r.attempts == "2" and d[1] == 1,
    "GET: a 429 with RateLimit-Reset: 1 waits 1 s", show(r))

  r = run(port, "get_refused")
  check(r.status == "nil" and r.err == "HTTP 502"
    and r.reason == "max_attempts" and r.attempts == "3",
    "GET: proxy_pass to a refused port (502) is retried to max_attempts",
    show(r))

  r = run(port, "odd_name")
  check(r.status == "200" and r.attempts == "1",
    "a first-try success is passed on as it came", show(r))

  r = run(port, "max_hint")
  check(r.status == "nil" and r.err == "HTTP 429"
    and r.reason == "retry_after" and r.hits == "1"
    and tonumber(r.elapsed) < 0.5,
    "a Retry-After of 120 s over max_hint 5 gives up at once, reason "
    .. "retry_after", show(r))
end

local function post_checks(port)
  local r = run(port, "post_read_timeout")
  local reads = numbers(r.reads)
  check(r.status == "nil" and r.err == "timeout"
    and r.reason == "not_idempotent" and r.attempts == "1"
    and r.hits == "1" and r.method == "POST" and reads[1] == 300,
    "POST over a cosocket: a read timeout (300 ms per-try) is not retried",
    show(r))

  r = run(port, "post_refused")
  check(r.status == "200" and r.attempts == "2" and r.hits == "1"
    and r.method == "POST",
    "POST: a refused connection is retried; the upstream saw it once",
    show(r))

  r = run(port, "post_idempotency_key")
  check(r.status == "200" and r.attempts == "3" and r.hits == "3",
    "POST with an Idempotency-Key: two 503s retried", show(r))

  r = run(port, "post_capture_503")
  check(r.status == "nil" and r.err == "HTTP 503"
    and r.reason == "not_idempotent" and r.hits == "1"
    and r.method == "POST",
    "POST through capture: a 503 (the request arrived) is not retried",
    show(r))
end

local function timeout_checks(port)
  local r = run(port, "shrinking_timeouts")
  local reads, starts = numbers(r.reads), numbers(r.starts)
  local ok = #reads >= 3 and #reads == #starts
  for i = 2, #reads do ok = ok and reads[i] < reads[i - 1] end
  local past = 0
  for i = 1, #reads do
    past = math.max(past, starts[i] + reads[i] / 1000 - 1.2)
  end
  check(ok and r.err == "timeout" and past <= 0.001
    and tonumber(r.elapsed) < 1.2 + 0.05,
    "per-try timeouts shrink towards the 1.2 s deadline, none past it",
    show(r) .. ("\nlatest try end past the deadline: %.1f ms")
      :format(past * 1000))
end

------------------------------------------------------------------------
-- /metrics, read back by python3-prometheus-client

local function unhex(h)
  return (h:gsub("%x%x", function(x) return string.char(tonumber(x, 16)) end))
end

local function parse_metrics(text)
  local f = assert(io.open(PREFIX .. "/metrics.txt", "w"))
  f:write(text)
  f:close()
  local p = assert(io.popen(PYTHON .. " " .. ROOT
    .. "/spec/nginx/prom_parse.py <" .. PREFIX .. "/metrics.txt 2>&1"))
  local out = p:read("*a")
  local ok = p:close()
  local families, samples = {}, {}
  for line in out:gmatch("[^\n]+") do
    local name, typ, help = line:match("^family (%S+) (%S+) (%x*)$")
    if name then families[name] = { type = typ, help = unhex(help) } end
    local sname, labels, value = line:match("^sample (%S+) (%S+) (%S+)$")
    if sname then
      local l = {}
      for k, v in labels:gmatch("(%w+)=(%x*)") do l[k] = unhex(v) end
      local key = sname .. "|" .. (l.name or "") .. "|" .. (l.reason or "")
      samples[key] = tonumber(value)
    end
  end
  return ok == true or ok == 0, families, samples, out
end

-- the counts each case's name must show (0: no sample)
local expected = {
  get_retry_after_seconds = { attempts = 2, retries = 1, successes = 1,
    successes_after_retry = 1, hints_honoured = 1 },
  get_retry_after_date = { attempts = 2, retries = 1, successes = 1,
    successes_after_retry = 1, hints_honoured = 1 },
  get_429_x_ratelimit_reset = { attempts = 2, retries = 1, successes = 1,
    successes_after_retry = 1, hints_honoured = 1 },
  get_refused = { attempts = 3, retries = 2,
    giveups = { max_attempts = 1 } },
  max_hint = { attempts = 1, giveups = { retry_after = 1 } },
  post_read_timeout = { attempts = 1, giveups = { not_idempotent = 1 } },
  post_refused = { attempts = 2, retries = 1, successes = 1,
    successes_after_retry = 1 },
  post_idempotency_key = { attempts = 3, retries = 2, successes = 1,
    successes_after_retry = 1 },
  ['we"ird \\ name ☕'] = { attempts = 1, successes = 1 },
  -- its retries key held another writer's string (/plant): deleted,
  -- counted afresh
  foreign = { attempts = 2, retries = 1, successes = 1,
    successes_after_retry = 1 },
}
local COUNTERS = { "attempts", "retries", "successes",
  "successes_after_retry", "budget_refusals", "hints_honoured" }

local function metrics_checks(port)
  -- foreign keys and values under the prefix first: /metrics must parse
  local planted = get(port, "/plant")
  check(planted == "ok\n", "/plant wrote foreign keys under the metrics "
    .. "prefix", planted)
  local text, status, head = get(port, "/metrics")
  check(status == 200 and (head or ""):lower():match(
    "content%-type: text/plain; version=0%.0%.4"),
    "/metrics answers text/plain; version=0.0.4", head)
  local ok, families, samples, out = parse_metrics(text or "")
  check(ok, "python3-prometheus-client parses /metrics", out)
  local typed = 0
  for _, c in ipairs(COUNTERS) do
    local f = families["backoff_" .. c]
    if f and f.type == "counter" and #f.help > 0 then typed = typed + 1 end
  end
  local g = families.backoff_giveups
  if g and g.type == "counter" then typed = typed + 1 end
  check(typed == 7, "every family is a counter with its HELP text", out)
  local wrong = {}
  for name, want in pairs(expected) do
    for _, c in ipairs(COUNTERS) do
      local got = samples["backoff_" .. c .. "_total|" .. name .. "|"] or 0
      if got ~= (want[c] or 0) then
        wrong[#wrong + 1] = ("%s %s: %s, expected %s"):format(name, c, got,
          want[c] or 0)
      end
    end
    for reason, v in pairs(want.giveups or {}) do
      local got = samples["backoff_giveups_total|" .. name .. "|" .. reason]
      if got ~= v then
        wrong[#wrong + 1] = ("%s giveups %s: %s, expected %s"):format(name,
          reason, tostring(got), v)
      end
    end
  end
  check(#wrong == 0, "the parsed counters are the counts of the requests "
    .. "made (a name with quotes, a backslash and UTF-8 included), the "
    .. "foreign keys (one not UTF-8) skipped", table.concat(wrong, "\n"))
  local log = H.read_file(PREFIX .. "/logs/error.log")
  local _, said = log:gsub("backoff.metrics: corrupt value under key "
    .. "'backoff\\tretries\\tforeign' %('not a count'; not one it writes",
    "")
  check(said == 1 and not log:find("counts lost for 'foreign'", 1, true),
    "a foreign value under a metrics key is logged once, deleted and "
    .. "counted afresh (not as a full dict)", said)
end

------------------------------------------------------------------------
-- a full lua_shared_dict: a forced eviction is logged at warn, once per
-- dict and minute, naming the dict (300 recorders filling it from one
-- request: one line)

local function eviction_checks(port)
  local r = fields(get(port, "/evict"))
  local log = H.read_file(PREFIX .. "/logs/error.log")
  local line = "the lua_shared_dict 'tiny' is full: adding to key '"
  local probe, fillers, level = 0, 0, true
  for l in log:gmatch("[^\n]+") do
    if l:find(line, 1, true) then
      if l:find(line .. "probe'", 1, true) then probe = probe + 1
      else fillers = fillers + 1 end
      level = level and l:find("[warn]", 1, true) ~= nil
    end
  end
  check(r.forced == "2" and r.stale == "0" and tonumber(r.keys)
    and tonumber(r.keys) < 300,
    "a 12k dict fills up: incr of a new key evicts others (forcible)",
    show(r))
  check(probe + fillers == 1 and level,
    "a forced eviction is logged at warn, naming the dict: 2 probe and "
    .. "hundreds of filler evictions are one line in the minute",
    ("probe lines %d, filler lines %d, all warn: %s"):format(probe,
      fillers, tostring(level)))
  local advice = log:find("give each user (each budget, backoff.metrics, "
    .. "other code) a lua_shared_dict of its own, larger", 1, true)
  check(advice ~= nil, "the line advises a dict of its own, larger")
end

------------------------------------------------------------------------
-- a retry in header_filter and log: an error, and the worker free

local function late_checks(port)
  local _, status = get(port, "/late")
  -- the log phase runs after the answer: ping at once, 20 times
  local worst, served = 0, 0
  for _ = 1, 20 do
    local t0 = socket.gettime()
    local body = get(port, "/ping")
    local took = socket.gettime() - t0
    if body == "pong\n" then served = served + 1 end
    worst = math.max(worst, took)
  end
  check(status == 200 and served == 20 and worst < 0.050,
    "the worker answers /ping within 50 ms while log_by_lua asks for a "
    .. "retry", ("%d of 20 pings, the slowest %.1f ms"):format(served,
    worst * 1000))
  local r = fields(get(port, "/late_result"))
  for _, phase in ipairs { "filter", "log" } do
    local name = phase == "filter" and "header_filter" or "log"
    local err = r[phase .. "err"] or ""
    check(r[phase .. "ok"] == "false"
      and err:find("backoff.retry: cannot wait 2 s in nginx's " .. name
        .. " phase", 1, true)
      and err:find("ngx.timer.at", 1, true)
      and tonumber(r[phase .. "took"]) < 0.050,
      "a retry in " .. name .. " raises the phase error at once",
      show(r))
    check((r[phase .. "sleep"] or ""):find("false backoff.sleep: cannot "
      .. "wait 1 s in nginx's " .. name .. " phase", 1, true) == 1,
      "backoff.sleep in " .. name .. " raises instead of blocking",
      r[phase .. "sleep"])
  end
end

local function main()
  local ports = { main = H.free_port(), up = H.free_port(),
                  dead = H.free_port() }
  local ok, err = H.start_nginx(PREFIX, ROOT .. "/spec/nginx/http.conf.in",
    { ROOT = ROOT, PORT = ports.main, UP = ports.up, DEAD = ports.dead },
    90, function() return get(ports.main, "/ping") and true end)
  if not check(ok, "nginx with the Lua module starts on 127.0.0.1", err)
  then
    return
  end
  for _, f in ipairs { get_checks, post_checks, timeout_checks,
                       late_checks, metrics_checks, eviction_checks } do
    local fine, e = pcall(f, ports.main)
    check(fine, "checks ran without a Lua error", e)
  end
  H.stop_nginx(PREFIX)
  -- except what the cases cause on purpose: the refused port
  local bad = H.errors_logged(PREFIX, "Connection refused")
  check(#bad == 0, "nginx logged no error", table.concat(bad, "\n"))
end

main()
tap.plan()
