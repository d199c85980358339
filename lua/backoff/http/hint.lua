-- backoff.http.hint: how long a response asks the client to wait, from
-- its headers.  Part of backoff.http (doc/http.md); no nginx needed.
--
--   hint(headers [, status [, now]]) -> seconds, header name | nil
--
-- 1. Retry-After (RFC 9110, 10.2.3), either form, through
--    backoff.retry_after; on any status.
-- 2. RateLimit-Reset, then X-RateLimit-Reset: only when the status is
--    429, or when the matching RateLimit-Remaining /
--    X-RateLimit-Remaining is 0 (a reset time says when the quota
--    comes back; it is no reason to wait after a 503 with quota left).
--    The value is seconds or a Unix time: a number of at least
--    1,000,000,000 (2001-09-09T01:46:40Z) is a Unix time, and the wait
--    is max(0, value - now); a smaller one is seconds to wait.  No rate
--    limiter asks for a 31-year wait, and no clock reads 1970.
--    Digits with an optional fraction; anything else is ignored.
-- A malformed header is no hint (the next source is tried).  Every
-- hint is capped at 2^31 seconds as Retry-After's are; bounding it
-- (max_hint) is the caller's job.

local retry_after = require "backoff.retry_after"

local error, ipairs, pairs, pcall, rawget, tonumber, tostring, type =
      error, ipairs, pairs, pcall, rawget, tonumber, tostring, type
local lower, match = string.lower, string.match
local os_time = os.time

local CAP = 2147483648.0        -- 2^31 s, as backoff.retry_after
local EPOCH = 1000000000        -- at least this: a Unix time

local M = {}

-- the value of header `name` (any case) in headers: lua-resty-http's
-- res.headers (case-insensitive already), ngx.location.capture's
-- res.header or a plain table; a repeated header (a list) gives its
-- first value; nil when absent or not a string
local function lookup(headers, name)
  local v = headers[name]
  if v == nil then
    local want = lower(name)
    for k, x in pairs(headers) do
      if type(k) == "string" and lower(k) == want then
        v = x
        break
      end
    end
  end
  if type(v) == "table" then v = rawget(v, 1) end
  if type(v) ~= "string" then return nil end
  return v
end

--- header(headers, name) -> string | nil.  Never raises: headers that
-- are not a table, or whose lookup raises, have no such header.
function M.header(headers, name)
  if type(name) ~= "string" then
    error("bad argument #2 to 'header' (string expected for 'name', got "
          .. type(name) .. ")", 2)
  end
  if type(headers) ~= "table" then return nil end
  local ok, v = pcall(lookup, headers, name)
  if ok then return v end
  return nil
end
local header = M.header

local function default_now()
  local ngx = rawget(_G, "ngx")
  if type(ngx) == "table" and type(ngx.now) == "function" then
    return ngx.now()
  end
  return os_time()
end

-- a reset header's value -> seconds to wait, or nil
local function reset_seconds(v, now)
  v = match(v, "^[ \t]*(.-)[ \t]*$")
  if #v > 32 or not (match(v, "^%d+$") or match(v, "^%d+%.%d+$")) then
    return nil
  end
  local n = tonumber(v)
  if not n then return nil end
  if n >= EPOCH then
    n = n - (now or default_now())
    if n < 0 then n = 0 end
  end
  if n > CAP then n = CAP end
  return n + 0.0
end

local RESETS = {
  { "RateLimit-Reset", "RateLimit-Remaining" },
  { "X-RateLimit-Reset", "X-RateLimit-Remaining" },
}

-- the remaining quota is 0 (a number, spaces allowed)
local function exhausted(headers, name)
  local r = header(headers, name)
  return r ~= nil and tonumber((match(r, "^[ \t]*(.-)[ \t]*$"))) == 0
end

--- hint(headers [, status [, now]]) -> seconds, source | nil.  now: Unix
-- seconds (default ngx.now() inside nginx, else os.time()).
local function check_args(status, now)
  if status ~= nil and type(status) ~= "number" then
    error("bad argument #2 to 'hint' (number or nil expected for "
          .. "'status', got " .. type(status) .. ")", 3)
  end
  if now ~= nil and (type(now) ~= "number" or now ~= now
                     or now == 1 / 0 or now == -1 / 0) then
    error("bad argument #3 to 'hint' (finite number expected for 'now', "
          .. "got " .. (now ~= now and "nan" or type(now) == "number"
          and tostring(now) or type(now)) .. ")", 3)
  end
end

function M.hint(headers, status, now)
  check_args(status, now)
  if type(headers) ~= "table" then return nil end
  local ra = header(headers, "Retry-After")
  if ra then
    local s = retry_after(ra, now)
    if s then return s, "Retry-After" end
  end
  for _, r in ipairs(RESETS) do
    if status == 429 or exhausted(headers, r[2]) then
      local v = header(headers, r[1])
      local s = v and reset_seconds(v, now)
      if s then return s, r[1] end
    end
  end
  return nil
end

return M
