-- Fleet safety against a real nginx with two workers (Debian's nginx +
-- libnginx-mod-http-lua): a retry budget shared by both workers,
-- Retry-After hints obeyed by the runner, and backoff.balancer under
-- proxy_next_upstream.  Starts nginx on 127.0.0.1 under `timeout` (it
-- stops by itself even if this script dies), stops it by pid.  TAP.
--   lua5.4 spec/nginx/fleet.lua ROOT
-- The helpers shared with spec/nginx/run.lua are in spec/nginx/harness.lua.
local socket = require "socket"

local ROOT = assert(arg[1], "usage: fleet.lua ROOT")
local H = dofile(ROOT .. "/spec/nginx/harness.lua")
local PREFIX = ROOT .. "/build/nginx-fleet"

local tap = H.tap(os.getenv("VERBOSE"))
local check, skip = tap.check, tap.skip

-- send a GET now; the function returned reads body, status, headers
local function start_get(port, path)
  return (H.start_get(port, path, 15))
end

local function get(port, path)
  return H.get(port, path, 15)
end

-- key=value pairs separated by spaces or lines
local function fields(body)
  return H.fields(body, "\n ")
end

local function start_nginx(ports)
  return H.start_nginx(PREFIX, ROOT .. "/spec/nginx/fleet.conf.in",
    { ROOT = ROOT, PORT = ports.main, HANG = ports.hang, FAIL = ports.fail },
    60, function() return get(ports.main, "/ping") and true end)
end

-- GETs path?want=w until worker w answers (the kernel spreads new
-- connections over the workers; the other worker does nothing)
local function from_worker(port, path, w)
  for _ = 1, 200 do
    local r = fields(get(port, path .. "?want=" .. w))
    if r.worker == tostring(w) and not r.skipped then return r end
  end
  return {}
end

------------------------------------------------------------------------
-- (a) a budget shared by both workers

local function budget_checks(port)
  get(port, "/reset")
  local a0 = from_worker(port, "/call", 0)
  check(a0.attempts == "5" and a0.tokens == "0",
    "worker 0: a failing call retries 4 times on 20 tokens (cost 5)",
    ("attempts %s tokens %s"):format(tostring(a0.attempts),
                                     tostring(a0.tokens)))
  local a1 = from_worker(port, "/call", 1)
  check(a1.attempts == "1",
    "worker 1: after worker 0 emptied the shared budget, no retry",
    tostring(a1.attempts))

  get(port, "/reset")
  local d1 = from_worker(port, "/drain", 1)
  check(d1.took == "4", "worker 1 drains the 4 retries of the budget",
        tostring(d1.took))
  local c0 = from_worker(port, "/call", 0)
  check(c0.attempts == "1", "worker 0 then does not retry either",
        tostring(c0.attempts))

  -- 60 concurrent requests x 30 steps on 300 tokens: 1200 withdrawals
  -- and 600 deposits of 1 token, racing in and across both workers
  get(port, "/reset")
  local pending = {}
  for i = 1, 60 do pending[i] = start_get(port, "/churn?n=30") end
  local answered = 0
  for i = 1, 60 do
    local _, status = pending[i]()
    if status == 200 then answered = answered + 1 end
  end
  local s = fields(get(port, "/stats"))
  local w, dep = tonumber(s.withdrawn), tonumber(s.deposited)
  local detail = ("withdrawn %s, deposited %s, tokens %s, raw %s, by "
    .. "worker %s/%s"):format(s.withdrawn, s.deposited, s.tokens, s.raw,
    s.worker0, s.worker1)
  check(answered == 60 and tonumber(s.worker0) > 0
    and tonumber(s.worker1) > 0,
    "60 concurrent churn requests answered, by both workers", detail)
  check(w and dep == 600 and w <= 300 + dep and w >= 300,
    "concurrent withdrawals never overdrew: withdrawn <= 300 + deposits",
    detail)
  local raw = tonumber(s.raw)
  -- raw = 300 + deposits - take-backs - withdrawn, take-backs >= 0
  check(raw and w and raw <= 300 and raw <= 300 + dep - w
    and tonumber(s.tokens) == math.max(raw, 0),
    "the counter ends at most capacity; tokens() is it clamped", detail)
end

------------------------------------------------------------------------
-- (b) Retry-After from an upstream, obeyed by the runner

local function hint_checks(port)
  local r = fields(get(port, "/obey?key=s1&fails=2&form=seconds&s=1"))
  if r.skip then
    return skip("Retry-After checks", "hints not available: " .. r.skip)
  end
  local d = {}
  for x in (r.delays or ""):gmatch("[^,]+") do d[#d + 1] = tonumber(x) end
  local e = tonumber(r.elapsed) or 0
  check(r.result == "ok" and #d == 2 and d[1] == 1 and d[2] == 1
    and e >= 1.99 and e < 3,
    "Retry-After: 1 (seconds) twice: the runner waited 1 s each time",
    ("%s delays %s elapsed %s"):format(r.result, r.delays, r.elapsed))

  r = fields(get(port, "/obey?key=d1&fails=1&form=date&s=2"))
  d = tonumber(r.delays)
  e = tonumber(r.elapsed) or 0
  check(r.result == "ok" and d and d >= 1 and d <= 2 and e >= 1 and e < 3,
    "Retry-After: an HTTP-date 2 s ahead: waited until then (1-2 s)",
    ("%s delays %s elapsed %s"):format(r.result, r.delays, r.elapsed))

  r = fields(get(port, "/obey?key=m1&fails=1&form=seconds&s=30&max_hint=5"))
  e = tonumber(r.elapsed) or 99
  check(r.result == "nil" and r.reason == "retry_after" and e < 0.5,
    "Retry-After: 30 s over max_hint 5: gives up at once",
    ("%s %s elapsed %s"):format(r.result, r.reason, r.elapsed))

  r = fields(get(port, "/obey?key=x1&fails=1&form=seconds&s=3&duration=2"))
  e = tonumber(r.elapsed) or 99
  check(r.result == "nil" and r.reason == "max_actual_duration" and e < 0.5,
    "Retry-After: 3 s past a 2 s deadline: gives up at once",
    ("%s %s elapsed %s"):format(r.result, r.reason, r.elapsed))
end

------------------------------------------------------------------------
-- (c) backoff.balancer under proxy_next_upstream

local function tries_of(head)
  local t = {}
  for a, to, peer in (head or ""):match("X%-Tries: ([^\r\n]*)")
      :gmatch("(%d+):([%d.%-]+):(%a+)") do
    t[#t + 1] = { attempt = tonumber(a), timeout = tonumber(to),
                  peer = peer }
  end
  return t
end

local function shrinking(t)
  for i = 2, #t do
    if not (t[i].timeout <= t[i - 1].timeout and t[i].timeout > 0) then
      return false
    end
  end
  return #t > 0
end

local function show(t)
  local s = {}
  for i, x in ipairs(t) do s[i] = x.peer .. " " .. x.timeout end
  return table.concat(s, ", ")
end

-- a budget of 10 tokens, cost 5: two retries for the fleet, then none
local function balancer_budget_checks(port)
  local _, status, head = get(port, "/proxy?p=limits&budget=1")
  local t = tries_of(head)
  local tokens = fields(get(port, "/proxy_tokens")).tokens
  check(status == 504 and #t == 3 and tokens == "0",
    "balancer + shared budget: 2 retries paid for, then the budget stops "
    .. "them", ("status %s, tokens %s: %s"):format(status, tokens, show(t)))
  _, status, head = get(port, "/proxy?p=limits&budget=1")
  t = tries_of(head)
  check(status == 504 and #t == 1,
    "balancer + empty shared budget: one try, no retry",
    ("status %s: %s"):format(status, show(t)))
end

local function balancer_checks(port)
  balancer_budget_checks(port)
  local t0 = socket.gettime()
  local _, status, head = get(port, "/proxy?p=limits")
  local el = socket.gettime() - t0
  local t = tries_of(head)
  check(status == 503 and #t == 4 and t[1].peer == "hang"
    and t[2].peer == "fail" and t[4].peer == "fail",
    "balancer: hang, 503, hang, 503: 4 tries (max_attempts), then the "
    .. "last 503", ("status %s, %.2f s: %s"):format(status, el, show(t)))
  check(shrinking(t) and t[1].timeout == 0.8 and el < 1.6,
    "balancer: per-try timeouts from the policy, shrinking, within its "
    .. "1.6 s", ("%.2f s: %s"):format(el, show(t)))

  t0 = socket.gettime()
  _, status, head = get(port, "/proxy?p=deadline")
  el = socket.gettime() - t0
  t = tries_of(head)
  check((status == 504 or status == 502) and #t >= 3 and #t < 20
    and shrinking(t) and el >= 0.9 and el < 1.4,
    "balancer: a hanging peer is tried with shrinking timeouts until "
    .. "the 1 s deadline", ("status %s, %.2f s: %s"):format(status, el,
    show(t)))
end

local function main()
  local ports = { main = H.free_port(), hang = H.free_port(),
                  fail = H.free_port() }
  local ok, err = start_nginx(ports)
  if not check(ok, "nginx with 2 workers and the Lua module starts on "
               .. "127.0.0.1", err) then
    return
  end
  for _, f in ipairs { budget_checks, hint_checks, balancer_checks } do
    local fine, e = pcall(f, ports.main)
    check(fine, "checks ran without a Lua error", e)
  end
  H.stop_nginx(PREFIX)
  -- except the upstream timeouts the balancer check causes
  local bad = H.errors_logged(PREFIX, "upstream timed out")
  check(#bad == 0, "nginx logged no error", table.concat(bad, "\n"))
end

main()
tap.plan()
