-- backoff.retry_after: the number of seconds an HTTP Retry-After field
-- value asks a client to wait (RFC 9110, section 10.2.3).
--
--   local retry_after = require "backoff.retry_after"
--   retry_after("120")                            --> 120
--   retry_after("Sun, 06 Nov 1994 08:49:37 GMT", 784111657)  --> 120
--   retry_after("soon")        --> nil, "Retry-After: not delay-seconds ..."
--
-- The value is delay-seconds (1*DIGIT) or an HTTP-date in any of the
-- three forms of RFC 9110, section 5.6.7:
--   IMF-fixdate   Sun, 06 Nov 1994 08:49:37 GMT
--   RFC 850       Sunday, 06-Nov-94 08:49:37 GMT
--   asctime       Sun Nov  6 08:49:37 1994
-- Rules (also in the README):
--   * spaces and tabs around the value (OWS) are ignored; nothing else is
--     (no sign, decimal point, exponent, hex, inner junk);
--   * HTTP-date is case-sensitive, as RFC 9110 says; every field is
--     checked: day and month names, day of month for that month and year
--     (leap years), hour 0-23, minute 0-59, second 0-60 (60: a leap second,
--     counted as the next second, as POSIX time does), year 1900 or later
--     (RFC 5322's rule), "GMT" where the form has it.  The day name must
--     be a real one but need not match the date (RFC 9110 asks senders for
--     that, and recipients in the wild ignore it);
--   * RFC 850's two-digit year is placed in the century that makes the
--     date at most 50 years after `now`; a date more than 50 years in the
--     future means the most recent past year with those two digits;
--   * a date gives max(0, date - now): a date in the past gives 0;
--   * every result is at most CAP = 2^31 seconds (about 68 years): larger
--     delay-seconds or later dates saturate there (RFC 9111, section
--     1.2.2, saturates delta-seconds at the same value), never inf;
--   * a number value is taken as delay-seconds already parsed: a finite
--     number >= 0 gives itself (capped); NaN, inf or negative give nil;
--   * results are always floats (math.type "float" on 5.3+), so every Lua
--     gives the same value of the same subtype;
--   * `now` is Unix time in seconds (any finite number, fractions kept);
--     default: ngx.now() when a global `ngx` with a `now` exists (the
--     request's time to the millisecond: ngx.time() is whole seconds, a
--     wait up to 1 s too long), else os.time().  A `now` that is not a
--     finite number raises: that is misuse, not bad data.  Malformed
--     values never raise: they return nil and a short message.
-- Dates are turned into Unix time by calendar arithmetic here, not by
-- os.time (which reads the local time zone), and are exact on every Lua.

local floor, type, tonumber, rawget, error, tostring =
      math.floor, type, tonumber, rawget, error, tostring
local byte, sub, match = string.byte, string.sub, string.match
local os_time, G = os.time, _G

local CAP = 2147483648.0        -- 2^31 seconds: the largest result

local NOT_VALUE = "Retry-After: not delay-seconds or an HTTP-date"

local MONTHS = {
  Jan = 1, Feb = 2, Mar = 3, Apr = 4, May = 5, Jun = 6,
  Jul = 7, Aug = 8, Sep = 9, Oct = 10, Nov = 11, Dec = 12,
}
local DAYS = {
  Mon = true, Tue = true, Wed = true, Thu = true, Fri = true, Sat = true,
  Sun = true,
}
local LONG_DAYS = {
  Monday = true, Tuesday = true, Wednesday = true, Thursday = true,
  Friday = true, Saturday = true, Sunday = true,
}

-- the three forms, on a value already stripped of OWS; names are
-- captured as letters so that a wrong name gets its own message
local L3 = "([A-Za-z][A-Za-z][A-Za-z])"
local D2 = "([0-9][0-9])"
local TIME = D2 .. ":" .. D2 .. ":" .. D2
local IMF_FIXDATE = "^" .. L3 .. ", " .. D2 .. " " .. L3
                    .. " ([0-9][0-9][0-9][0-9]) " .. TIME .. "(.*)$"
local RFC850_DATE = "^([A-Za-z]+), " .. D2 .. "%-" .. L3 .. "%-" .. D2
                    .. " " .. TIME .. "(.*)$"
local ASCTIME_DATE = "^" .. L3 .. " " .. L3 .. " ([ 0-9][0-9]) " .. TIME
                     .. " ([0-9][0-9][0-9][0-9])$"

local function is_leap(y)
  return y % 4 == 0 and (y % 100 ~= 0 or y % 400 == 0)
end

local function days_in_month(y, m)
  if m == 2 then return is_leap(y) and 29 or 28 end
  if m == 4 or m == 6 or m == 9 or m == 11 then return 30 end
  return 31
end

-- Days from 1970-01-01 to y-m-d (proleptic Gregorian).  The year is taken
-- to start on March 1, so that February, with its leap day, comes last:
-- then the days before month m are floor((153 * (m - 3) + 2) / 5) for
-- m = 3..14 (March..February: 31 30 31 30 31 31 30 31 30 31 31 28/29),
-- and the days before year y are 365 * y plus its leap days.  719469 is
-- that count for 1970-01-01, plus one because days start at 1.  Every
-- step is exact in a double for any year a Retry-After can name.
local function days_from_civil(y, m, d)
  if m <= 2 then
    y, m = y - 1, m + 12
  end
  return 365 * y + floor(y / 4) - floor(y / 100) + floor(y / 400)
         + floor((153 * m - 457) / 5) + d - 719469
end

local function unix_time(y, mo, d, h, mi, s)
  return days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + s
end

-- the UTC year that Unix time t falls in; the estimate is off by at most
-- one, and the two bounded steps keep a huge t from looping forever
local function year_of(t)
  local days = floor(t / 86400)
  local y = floor(days / 365.2425) + 1970
  for _ = 1, 2 do
    if days_from_civil(y, 1, 1) > days then y = y - 1 end
  end
  for _ = 1, 2 do
    if days_from_civil(y + 1, 1, 1) <= days then y = y + 1 end
  end
  return y
end

-- RFC 9110, section 5.6.7: a two-digit year that would put the date more
-- than 50 years after now means the most recent past year with the same
-- last two digits.  The first year >= now's year ending in yy is tried;
-- if the date in it, moved back 50 years, is still after now, the date
-- itself is more than 50 years ahead, and the century before is taken.
local function rfc850_year(yy, mo, d, h, mi, s, now)
  local ny = year_of(now)
  local y = ny - ny % 100 + yy
  if y < ny then y = y + 100 end
  if unix_time(y - 50, mo, d, h, mi, s) > now then y = y - 100 end
  return y
end

-- the checks common to the three forms; returns a message or nil
local function check_fields(mo, d, h, mi, s)
  if not mo then return "Retry-After: bad month name" end
  if d < 1 or d > 31 then return "Retry-After: day out of range" end
  if h > 23 then return "Retry-After: hour out of range" end
  if mi > 59 then return "Retry-After: minute out of range" end
  if s > 60 then return "Retry-After: second out of range" end
  return nil
end

local function default_now()
  local ngx = rawget(G, "ngx")
  if type(ngx) == "table" and ngx.now then return ngx.now() end
  return os_time()
end

-- returns the Unix time of an HTTP-date and the now used, or nil, message
local function parse_date(v, now)
  local wd, d, mon, y, h, mi, s, rest = match(v, IMF_FIXDATE)
  local long_day, yy
  if not wd then
    wd, d, mon, yy, h, mi, s, rest = match(v, RFC850_DATE)
    long_day = true
  end
  if not wd then
    wd, mon, d, h, mi, s, y = match(v, ASCTIME_DATE)
    long_day, rest = false, " GMT"      -- asctime has no zone: GMT
    if not wd then return nil, NOT_VALUE end
  end
  if not (long_day and LONG_DAYS or DAYS)[wd] then
    return nil, "Retry-After: bad day name"
  end
  local mo = MONTHS[mon]
  d, h, mi, s = tonumber(d), tonumber(h), tonumber(mi), tonumber(s)
  local err = check_fields(mo, d, h, mi, s)
  if err then return nil, err end
  if rest ~= " GMT" then
    return nil, "Retry-After: HTTP-date must end in GMT"
  end
  if now == nil then now = default_now() end
  now = now + 0.0              -- float: no integer wrap-around on 5.3+
  if yy then
    y = rfc850_year(tonumber(yy), mo, d, h, mi, s, now)
  else
    y = tonumber(y)
    if y < 1900 then return nil, "Retry-After: year before 1900" end
  end
  if d > days_in_month(y, mo) then
    return nil, "Retry-After: day out of range"
  end
  return unix_time(y, mo, d, h, mi, s), now
end

-- spaces and tabs around the value, found byte by byte: a pattern such
-- as "^[ \t]*(.-)[ \t]*$" is quadratic on long inner runs of spaces
local function strip_ows(v)
  local i, j = 1, #v
  local c = byte(v, i)
  while c == 32 or c == 9 do
    i = i + 1
    c = byte(v, i)
  end
  c = byte(v, j)
  while j >= i and (c == 32 or c == 9) do
    j = j - 1
    c = byte(v, j)
  end
  if i == 1 and j == #v then return v end
  return sub(v, i, j)
end

local function delay_seconds(v)
  local digits = match(v, "^0*([0-9]*)$")
  if not digits then return nil end
  if #digits > 10 then return CAP end  -- >= 10^10, above the cap
  local n = tonumber(digits) or 0      -- "" after the zeros: 0
  if n > CAP then return CAP end
  return n + 0.0
end

-- a number value: delay-seconds already parsed
local function parsed_seconds(value)
  if value ~= value or value == 1 / 0 then
    return nil, "Retry-After: not a finite number"
  elseif value < 0 then
    return nil, "Retry-After: negative number"
  end
  return (value > CAP and CAP or value) + 0.0
end

local function check_now(now)
  if now ~= nil and (type(now) ~= "number" or now ~= now
                     or now == 1 / 0 or now == -1 / 0) then
    error("bad argument #2 to 'retry_after' (finite number expected for"
          .. " 'now', got " .. (now ~= now and "nan"   -- not "-nan"
            or type(now) == "number" and tostring(now) or type(now)) .. ")", 3)
  end
end

local function retry_after(value, now)
  check_now(now)
  local tv = type(value)
  if tv == "number" then return parsed_seconds(value) end
  if tv ~= "string" then
    return nil, "Retry-After: string expected, got " .. tv
  end
  local v = strip_ows(value)
  if v == "" then return nil, "Retry-After: empty value" end
  local c = byte(v, 1)
  if c >= 48 and c <= 57 then            -- a digit: only delay-seconds
    local n = delay_seconds(v)
    if n then return n end
    return nil, NOT_VALUE
  end
  local t, now_or_err = parse_date(v, now)
  if not t then return nil, now_or_err end
  local wait = t - now_or_err
  if wait <= 0 then return 0.0 end
  if wait > CAP then return CAP end
  return wait + 0.0
end

return retry_after
