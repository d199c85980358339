-- backoff.fleet.redis: the few Redis calls of the fleet's timer, over
-- an nginx cosocket (internal).  RESP2 by hand: AUTH (a password, or
-- an ACL user and its password), SELECT, EVALSHA with EVAL on
-- NOSCRIPT, TLS through the cosocket's sslhandshake.  Hand-written
-- rather than lua-resty-redis: the module is `resty.redis` in OpenResty
-- and `nginx.redis` in Debian (lua-nginx-redis, 0.27, which has no TLS
-- option), and the timer needs five commands.
--
-- Every call has the cosocket's timeouts (connect, send, read: the
-- fleet's `timeout`), and runs only in a timer: asked from a request
-- phase it refuses (no Redis call ever delays a request).  The password
-- is never in a message.

local concat, setmetatable, tostring, tonumber = table.concat,
      setmetatable, tostring, tonumber

local R = {}

-- the phases in which the client may talk: nginx's timers only
local ALLOWED = { timer = true }

--- redis.encode(args) -> the RESP array of bulk strings for args
function R.encode(args)
  local out = { "*" .. #args .. "\r\n" }
  for i = 1, #args do
    local s = tostring(args[i])
    out[#out + 1] = "$" .. #s .. "\r\n" .. s .. "\r\n"
  end
  return concat(out)
end

local read

-- an array reply of n elements; an error inside is kept as a table
local function read_array(sock, n)
  local t = {}
  for i = 1, n do
    local v, err = read(sock)
    if v == nil and err then
      if err:sub(1, 1) ~= "-" then return nil, err end
      v = { err = err:sub(2) }
    end
    t[i] = v == nil and false or v
  end
  return t
end

--- read(sock) -> a reply: a string, a number, a table (an array), false
-- (a null), or nil and an error ("-..." for Redis' own, else the
-- socket's)
read = function(sock)
  local line, err = sock:receive("*l")
  if not line then return nil, err end
  local kind, rest = line:sub(1, 1), line:sub(2)
  if kind == "+" then return rest end
  if kind == "-" then return nil, "-" .. rest end
  if kind == ":" then return tonumber(rest) end
  local n = tonumber(rest)
  if kind == "$" and n then
    if n < 0 then return false end
    local data, e = sock:receive(n + 2)
    if not data then return nil, e end
    return data:sub(1, n)
  end
  if kind == "*" and n then
    if n < 0 then return false end
    return read_array(sock, n)
  end
  return nil, "not a Redis reply: " .. line:sub(1, 40)
end
R.read = read

local Conn = {}
Conn.__index = Conn

--- conn:call(...) -> the reply, or nil and an error (Redis' error text
-- without its "-")
function Conn:call(...)
  local ok, err = self.sock:send(R.encode({ ... }))
  if not ok then return nil, err end
  local v, e = read(self.sock)
  if v == nil and e and e:sub(1, 1) == "-" then e = e:sub(2) end
  return v, e
end

--- conn:eval(sha, script, nkeys, ...) -> EVALSHA, and EVAL when Redis
-- does not know the script (a restart, SCRIPT FLUSH)
function Conn:eval(sha, script, ...)
  local v, err = self:call("EVALSHA", sha, ...)
  if v == nil and err and err:find("^NOSCRIPT") then
    v, err = self:call("EVAL", script, ...)
  end
  return v, err
end

--- conn:done(keepalive_ms, pool_size): back into the cosocket pool
function Conn:done(idle, size)
  local ok = self.sock:setkeepalive(idle, size)
  if not ok then self.sock:close() end
end

function Conn:close() self.sock:close() end

-- AUTH and SELECT on a fresh connection
local function hello(c, o)
  if o.password then
    local v, err
    if o.username then
      v, err = c:call("AUTH", o.username, o.password)
    else
      v, err = c:call("AUTH", o.password)
    end
    if not v then return nil, "AUTH refused: " .. tostring(err) end
  end
  if o.database and o.database ~= 0 then
    local v, err = c:call("SELECT", o.database)
    if not v then return nil, "SELECT refused: " .. tostring(err) end
  end
  return true
end

--- redis.where(o) -> "host:port/db" (user@ when one), for messages:
-- never the password
function R.where(o)
  return (o.username and (o.username .. "@") or "") .. o.host .. ":"
    .. o.port .. "/" .. (o.database or 0) .. (o.ssl and " (tls)" or "")
end

--- redis.connect(o, ngx) -> conn, or nil and an error.  o: host, port,
-- database, username, password, ssl, ssl_verify, server_name, timeout
-- (seconds).  Only in a timer.
function R.connect(o, ngx)
  local phase = ngx.get_phase()
  if not ALLOWED[phase] then
    return nil, "no Redis call in the " .. tostring(phase) .. " phase"
  end
  local sock = ngx.socket.tcp()
  local ms = o.timeout * 1000
  sock:settimeouts(ms, ms, ms)
  local pool = R.where(o) .. (o.password and ":auth" or "")
  local ok, err = sock:connect(o.host, o.port, { pool = pool })
  if not ok then return nil, "connect: " .. tostring(err) end
  local c = setmetatable({ sock = sock }, Conn)
  if sock:getreusedtimes() > 0 then return c end
  if o.ssl then
    local s, e = sock:sslhandshake(nil, o.server_name or o.host,
                                   o.ssl_verify)
    if not s then
      sock:close()
      return nil, "TLS handshake: " .. tostring(e)
    end
  end
  local h, e = hello(c, o)
  if not h then
    sock:close()
    return nil, e
  end
  return c
end


return R
