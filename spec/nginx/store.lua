-- The store's rule for values an object did not write, inside a real
-- nginx (Debian's nginx + libnginx-mod-http-lua): every shared object
-- (the five budget kinds, the breaker, the latency estimator, the
-- hedging pace, metrics)
-- is used on one lua_shared_dict, then every key of the dict is
-- overwritten with a value it cannot have written (text, NaN, the
-- infinities, a negative count, a huge one, a fraction, a boolean, an
-- open state opened in the future, one open for 1e308 s, a probe token
-- with no expiry), one value at a time, and the objects are used again.
-- Checked: no Lua error; every budget allows a retry as a fresh one
-- does, the breaker allows an attempt, the delay is a finite number;
-- each value found is logged once at warn and deleted (never two lines
-- for one key in a round); a dict filled by another user is said once.
-- One worker (the objects' clock is the test's own, per worker);
-- bounded: about 30 requests; stopped by its pid.  TAP.
--   lua5.4 spec/nginx/store.lua ROOT
local ROOT = assert(arg[1], "usage: store.lua ROOT")
local H = dofile(ROOT .. "/spec/nginx/harness.lua")
local PREFIX = ROOT .. "/build/nginx-store"
local HOSTILE = 10                 -- store_app.HOSTILE

local tap = H.tap(os.getenv("VERBOSE"))
local check = tap.check

local port
local function get(path) return H.get(port, path, 10) end
local function fields(body) return H.fields(body or "", "\n") end

-- the error log's lines from line `from` on
local function log_lines(from)
  local lines = {}
  for l in H.read_file(PREFIX .. "/logs/error.log"):gmatch("[^\n]+") do
    lines[#lines + 1] = l
  end
  local out = {}
  for i = from, #lines do out[#out + 1] = lines[i] end
  return out, #lines
end

local function main()
  port = H.free_port()
  local ok, err = H.start_nginx(PREFIX, ROOT .. "/spec/nginx/store.conf.in",
    { ROOT = ROOT, PORT = port }, 60,
    function() return get("/ping") and true end)
  if not check(ok, "nginx starts on 127.0.0.1", err) then return end

  -- every object writes its keys: successes, failures (the breaker
  -- opens), then half-open after its interval
  for _ = 1, 3 do get("/use") end
  for _ = 1, 3 do get("/use?fail=1") end
  local r = fields(get("/use?dt=3"))
  check(r.token == "true" and r.delay ~= nil, "the objects work before "
    .. "any value is poisoned", H.read_file and table.concat({
      r.token, r.state, r.delay }, " "))
  local _, seen = log_lines(1)

  for v = 1, HOSTILE do
    local keys = {}
    for k in (get("/poison?v=" .. v) or ""):gmatch("[^\n]+") do
      keys[#keys + 1] = k
    end
    r = fields(get("/use?dt=0.5"))
    local delay = tonumber(r.delay)
    check(r.token == "true" and r.grpc == "true" and r.earned == "true"
      and r.adaptive == "true" and r.breaker == "true"
      and r.pace == "true" and delay
      and delay == delay and delay > 0 and delay < 2, ("value %d under "
      .. "all %d keys: every budget allows a retry, the breaker an "
      .. "attempt, the pace a hedge, the delay is finite"):format(v, #keys),
      get("/keys"))
    -- a ratio budget's slice may hold any count its traffic could make:
    -- a huge negative one refuses, for at most its window (10 s)
    if r.ratio ~= "true" then
      r = fields(get("/use?dt=10.5"))
      check(r.ratio == "true", ("value %d: the ratio budget refuses for "
        .. "no longer than its window"):format(v), get("/keys"))
    end
    local lines
    lines, seen = log_lines(seen + 1)
    local per_key, logged, wrong = {}, 0, {}
    for _, l in ipairs(lines) do
      local k = l:match("corrupt value under key '([^']*)'")
      if k then
        logged = logged + 1
        per_key[k] = (per_key[k] or 0) + 1
        if per_key[k] > 1 then wrong[#wrong + 1] = "twice: " .. k end
        if not l:find("[warn]", 1, true) then
          wrong[#wrong + 1] = "not at warn: " .. l
        end
      elseif l:find("[error]", 1, true) or l:find("[crit]", 1, true)
             or l:find("[alert]", 1, true) then
        wrong[#wrong + 1] = l
      end
    end
    check(#wrong == 0 and logged > 0, ("value %d: %d keys found it, each "
      .. "said once at warn, nothing at error"):format(v, logged),
      table.concat(wrong, "\n"))
  end

  -- another user fills a dict: hundreds of evictions, one line a minute
  get("/fill")
  local lines = log_lines(seen + 1)
  local full = 0
  for _, l in ipairs(lines) do
    if l:find("the lua_shared_dict 'tiny' is full", 1, true) then
      full = full + 1
    end
  end
  check(full == 1, "a dict filled by another user: its evictions said "
    .. "once in the minute", ("%d lines"):format(full))

  H.stop_nginx(PREFIX)
  local bad = H.errors_logged(PREFIX)
  check(#bad == 0, "nginx logged no error", table.concat(bad, "\n"))
end

main()
tap.plan()
