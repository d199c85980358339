-- What the scripts that drive a real nginx share: spec/nginx/run.lua,
-- spec/nginx/fleet.lua (TAP) and bench/nginx.lua.  They load it with
--   local H = dofile(ROOT .. "/spec/nginx/harness.lua")
-- nginx runs on 127.0.0.1 only, under `timeout` (it stops by itself even
-- if the script dies), and is stopped by its pid.
local socket = require "socket"

local H = {}

H.NGINX = os.getenv("NGINX") or "/usr/sbin/nginx"

-- TAP: check(ok, what, detail) prints one numbered line and, when the
-- check failed (or always, with `verbose`), the detail as # lines;
-- skip(what, why) counts as ok; plan() prints 1..n at the end.
function H.tap(verbose)
  local n = 0
  local t = {}
  function t.check(ok, what, detail)
    n = n + 1
    print((ok and "ok " or "not ok ") .. n .. " - " .. what)
    if detail and (not ok or verbose) then
      for line in tostring(detail):gmatch("[^\n]+") do
        print("# " .. line)
      end
    end
    return ok
  end
  function t.skip(what, why)
    n = n + 1
    print("ok " .. n .. " - " .. what .. " # SKIP " .. tostring(why))
  end
  function t.plan()
    print("1.." .. n)
  end
  return t
end

function H.sh(cmd)
  local ok = os.execute(cmd)
  return ok == true or ok == 0
end

function H.free_port()
  local s = assert(socket.bind("127.0.0.1", 0))
  local _, port = s:getsockname()
  s:close()
  return port
end

-- the file's contents, "" when it cannot be read
function H.read_file(path)
  local f = io.open(path)
  if not f then return "" end
  local s = f:read("*a")
  f:close()
  return s
end

-- Sends a GET on a new connection (each socket operation bounded by
-- `timeout` seconds, default 10) and returns a function that reads the
-- answer: body, status (a number), head; nil, err on failure.  When the
-- connection failed, its error comes back too, second.
function H.start_get(port, path, timeout)
  local c = socket.tcp()
  c:settimeout(timeout or 10)
  local ok, err = c:connect("127.0.0.1", port)
  if not ok then return function() return nil, err end, err end
  c:send("GET " .. path .. " HTTP/1.0\r\nHost: localhost\r\n\r\n")
  return function()
    local all = c:receive("*a")
    c:close()
    if not all then return nil, "no response" end
    local head, body = all:match("^(.-)\r\n\r\n(.*)$")
    return body, tonumber(all:match("^HTTP/%d%.%d (%d+)")), head
  end
end

-- one GET: body, status, head; nil, err on failure
function H.get(port, path, timeout)
  return (H.start_get(port, path, timeout))()
end

-- the key=value pairs of an answer's body as a table; a value ends at
-- any of the characters in `ends` (with "\n", a value may hold spaces)
function H.fields(body, ends)
  local t = {}
  for k, v in (body or ""):gmatch("(%w+)=([^" .. ends .. "]*)") do
    t[k] = v
  end
  return t
end

-- Starts nginx in `prefix` (made afresh, with conf/ and logs/) with the
-- conf template at path `template`, each @NAME@ in it replaced by
-- vars[NAME], under `timeout limit`.  Then calls ready() every 50 ms, up
-- to 100 times, until it returns a true value, and returns that value;
-- nil and nginx's output and error log when it never does.
function H.start_nginx(prefix, template, vars, limit, ready)
  H.sh("rm -rf '" .. prefix .. "' && mkdir -p '" .. prefix .. "/conf' '"
       .. prefix .. "/logs'")
  local conf = H.read_file(template):gsub("@(%u+)@", vars)
  local f = assert(io.open(prefix .. "/conf/nginx.conf", "w"))
  f:write(conf)
  f:close()
  H.sh(("timeout %d %s -p '%s/' -c conf/nginx.conf -g 'daemon off;' "
        .. ">'%s/logs/stdout' 2>&1 &"):format(limit, H.NGINX, prefix,
        prefix))
  for _ = 1, 100 do
    local v = ready()
    if v then return v end
    socket.sleep(0.05)
  end
  return nil, H.read_file(prefix .. "/logs/stdout")
    .. H.read_file(prefix .. "/logs/error.log")
end

-- QUIT to the master whose pid is in the prefix's logs, KILL if it has
-- not gone after 5 s
function H.stop_nginx(prefix)
  local pid = H.read_file(prefix .. "/logs/nginx.pid"):match("%d+")
  if not pid then return end
  H.sh("kill -QUIT " .. pid .. " 2>/dev/null")
  for _ = 1, 100 do
    if not H.sh("kill -0 " .. pid .. " 2>/dev/null") then return end
    socket.sleep(0.05)
  end
  H.sh("kill -KILL " .. pid .. " 2>/dev/null")
end

-- the error log's lines of level error or worse, except those that
-- match the pattern `except` (when given)
function H.errors_logged(prefix, except)
  local bad = {}
  for line in H.read_file(prefix .. "/logs/error.log"):gmatch("[^\n]+") do
    if (line:match("%[error%]") or line:match("%[alert%]")
        or line:match("%[crit%]") or line:match("%[emerg%]"))
       and not (except and line:match(except)) then
      bad[#bad + 1] = line
    end
  end
  return bad
end

return H
