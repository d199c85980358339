-- A fake Redis for the fleet specs (62) and bench/fleet_model.lua:
-- runs backoff.fleet.script's real text (its redis.call of TIME, TYPE,
-- PTTL, DEL, SADD, SREM, SCARD, PEXPIRE, GET, SET with PX and NX,
-- EXISTS, INCRBY) on tables, with keys
-- expiring by a virtual clock, and hands out clients as
-- backoff.fleet's `client` option wants them.
--   local fake = dofile("spec/fleet_fake_redis.lua")(now)  -- now(): s
--   fake.data[k]      a key's value (a table of members: a set)
--   fake.pexp[k]      its expiry in ms (nil: none)
--   fake.down         when set, clients fail to connect with it
--   fake.calls        evals run
--   fake.client       the `client` option
return function(now)
  local R = { data = {}, pexp = {}, calls = 0 }
  local function ms() return math.floor(now() * 1000) end
  local function live(k)
    local e = R.pexp[k]
    if e and ms() >= e then R.data[k], R.pexp[k] = nil, nil end
    return R.data[k]
  end
  local function kind(v)
    if v == nil then return "none" end
    if type(v) == "table" then return "set" end
    return "string"
  end
  local function card(v)
    local n = 0
    for _ in pairs(v or {}) do n = n + 1 end
    return n
  end
  local C = {}
  function C.TIME()
    local t = ms()
    return { tostring(math.floor(t / 1000)), tostring((t % 1000) * 1000) }
  end
  function C.TYPE(k) return { ok = kind(live(k)) } end
  function C.PTTL(k)
    if live(k) == nil then return -2 end
    local e = R.pexp[k]
    return e and e - ms() or -1
  end
  function C.DEL(...)
    for _, k in ipairs({ ... }) do R.data[k], R.pexp[k] = nil, nil end
    return 1
  end
  function C.SADD(k, m)
    local v = live(k) or {}
    assert(type(v) == "table", "WRONGTYPE")
    v[m] = true
    R.data[k] = v
    return 1
  end
  function C.SREM(k, m)
    local v = live(k)
    if v then assert(type(v) == "table", "WRONGTYPE") v[m] = nil end
    return 1
  end
  function C.SCARD(k) return card(live(k)) end
  function C.PEXPIRE(k, t)
    if live(k) ~= nil then R.pexp[k] = ms() + t end
    return 1
  end
  function C.GET(k)
    local v = live(k)
    assert(type(v) ~= "table", "WRONGTYPE")
    return v == nil and false or v
  end
  function C.INCRBY(k, n)
    local v = live(k)
    assert(type(v) ~= "table", "WRONGTYPE")
    local x = assert(tonumber(v or 0), "ERR value is not an integer")
    x = x + tonumber(n)
    R.data[k] = tostring(x)
    return x
  end
  function C.EXISTS(k) return live(k) ~= nil and 1 or 0 end
  function C.SET(k, v, ...)
    local a, px, nx = { ... }, nil, false
    for i = 1, #a do
      if a[i] == "PX" then px = tonumber(a[i + 1]) end
      if a[i] == "NX" then nx = true end
    end
    if nx and live(k) ~= nil then return false end
    R.data[k], R.pexp[k] = tostring(v), px and ms() + px or nil
    return { ok = "OK" }
  end
  local redis = { call = function(cmd, ...) return C[cmd](...) end }

  -- runs the script's text with ARGV (compiled once per text)
  local env = { redis = redis, math = math, type = type, string = string,
    tonumber = tonumber, ipairs = ipairs, tostring = tostring }
  local compiled = {}
  function R.eval(text, argv)
    local f = compiled[text]
    if not f then
      if setfenv then
        f = assert(loadstring(text)) setfenv(f, env)
      else
        f = assert(load(text, "=script", "t", env))
      end
      compiled[text] = f
    end
    env.ARGV = argv
    R.calls = R.calls + 1
    return f()
  end

  local Conn = {}
  Conn.__index = Conn
  function Conn.eval(_, _, text, nkeys, ...)
    assert(nkeys == 0)
    local argv = {}
    for i, v in ipairs({ ... }) do argv[i] = tostring(v) end
    local ok, r = pcall(R.eval, text, argv)
    if not ok then return nil, tostring(r) end
    return R.conv(r)
  end
  function Conn.done() end
  function Conn.close() end

  -- a script's reply as Redis gives it: false -> nil, numbers integers
  function R.conv(r)
    if type(r) ~= "table" then return r end
    local out = {}
    for i, v in ipairs(r) do
      out[i] = type(v) == "number" and math.floor(v) or v
    end
    return out
  end

  function R.client()
    if R.down then return nil, R.down end
    return setmetatable({}, Conn)
  end
  function R.flush() R.data, R.pexp = {}, {} end
  return R
end
