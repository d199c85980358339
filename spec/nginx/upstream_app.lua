-- The nginx side of spec/nginx/upstream.lua: one upstream declared from
-- a plain table in init_by_lua, four peers in the same nginx, and the
-- three ways through it (the balancer, up:request, up:call).
-- luacheck: globals ngx
local upstream = require "backoff.upstream"

local M = {}

function M.init(a, b, c, d)
  local peers = {}
  for i, p in ipairs { a, b, c, d } do peers[i] = "127.0.0.1:" .. p end
  -- what a JSON file would hold, plus the dict
  upstream.new { name = "api", shared = ngx.shared.backoff, peers = peers,
    hedge = { delay = 0.2 } }
end

-- a peer: dead (the connection closed without an answer) or serving
function M.peer()
  local port = ngx.var.server_port
  local stats = ngx.shared.stats
  stats:incr("hits:" .. port, 1, 0)
  if stats:get("dead:" .. port) then return ngx.exit(444) end
  stats:incr("served:" .. port, 1, 0)
  ngx.say("peer ", port)
end

-- /ctl?dead=PORT or /ctl?alive=PORT
function M.ctl()
  local stats = ngx.shared.stats
  local args = ngx.req.get_uri_args()
  if args.dead then stats:set("dead:" .. args.dead, true) end
  if args.alive then stats:delete("dead:" .. args.alive) end
  ngx.say("ok")
end

-- /hits: "hits:PORT=n served:PORT=n ..."
function M.hits()
  local stats = ngx.shared.stats
  local out = {}
  for _, k in ipairs(stats:get_keys(0)) do
    if k:match("^hits:") or k:match("^served:") then
      out[#out + 1] = k:gsub(":", "") .. "=" .. tostring(stats:get(k))
    end
  end
  ngx.say(table.concat(out, " "))
end

-- one HTTP/1.0 GET on a cosocket: a response table, or nil, err, stage
local function get(peer, path, t, cancel)
  local sock = ngx.socket.tcp()
  if cancel then cancel:on_cancel(sock) end
  if t then sock:settimeouts(t.connect, t.send, t.read) end
  local ok, err = sock:connect(peer.host, peer.port)
  if not ok then return nil, err, "connect" end
  ok, err = sock:send("GET " .. path .. " HTTP/1.0\r\nHost: x\r\n\r\n")
  if not ok then sock:close() return nil, err, "send" end
  local all
  all, err = sock:receive("*a")
  sock:close()
  if not all or all == "" then return nil, err or "closed", "read" end
  local status = tonumber(all:match("^HTTP/1%.%d (%d%d%d)"))
  if not status then return nil, "bad answer", "read" end
  return { status = status, headers = {}, body = all:match("\r\n\r\n(.*)$") }
end

function M.request()
  local up = upstream.get("api")
  local res, err, reason = up:request(function(_, t, cancel, peer)
    return get(peer, "/", t, cancel)
  end, { method = "GET" })
  if not res then
    ngx.status = 502
    return ngx.say("gave up: ", reason, ": ", err)
  end
  ngx.status = res.status
  ngx.print(res.body)
end

function M.call()
  local up = upstream.get("api")
  local res, err, reason = up:call(function(_, timeout, _, peer)
    local r, e = get(peer, "/", timeout and {
      connect = timeout * 1000, send = timeout * 1000,
      read = timeout * 1000 })
    if r and r.status == 200 then return r.body end
    return nil, e or ("HTTP " .. tostring(r and r.status))
  end)
  if not res then
    ngx.status = 502
    return ngx.say("gave up: ", reason, ": ", err)
  end
  ngx.print(res)
end

return M
