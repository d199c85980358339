-- backoff.retry_after: RFC 9110 Retry-After values (delay-seconds and the
-- three HTTP-date forms of section 5.6.7) -> seconds, or nil, message.
local retry_after = require "backoff.retry_after"

local CAP = 2 ^ 31
-- RFC 9110's example date, Sun, 06 Nov 1994 08:49:37 GMT, in Unix time
local T = 784111777
local IMF = "Sun, 06 Nov 1994 08:49:37 GMT"
local RFC850 = "Sunday, 06-Nov-94 08:49:37 GMT"
local ASCTIME = "Sun Nov  6 08:49:37 1994"
local JUN_2025 = 1748736000             -- 2025-06-01T00:00:00Z
local JAN_2090 = 3786912000             -- 2090-01-01T00:00:00Z

local DAY = { "Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat" }
local LONG_DAY = { "Sunday", "Monday", "Tuesday", "Wednesday", "Thursday",
  "Friday", "Saturday" }
local MONTH = { "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug",
  "Sep", "Oct", "Nov", "Dec" }

-- the three forms of the UTC instant x, built from the C library's gmtime
-- (os.date "!*t", independent of the local time zone)
local function forms(x)
  local t = os.date("!*t", x)
  local imf = ("%s, %02d %s %04d %02d:%02d:%02d GMT"):format(DAY[t.wday],
    t.day, MONTH[t.month], t.year, t.hour, t.min, t.sec)
  local rfc850 = ("%s, %02d-%s-%02d %02d:%02d:%02d GMT"):format(
    LONG_DAY[t.wday], t.day, MONTH[t.month], t.year % 100, t.hour, t.min,
    t.sec)
  local asctime = ("%s %s %2d %02d:%02d:%02d %04d"):format(DAY[t.wday],
    MONTH[t.month], t.day, t.hour, t.min, t.sec, t.year)
  return imf, rfc850, asctime
end

local function fails(value, now, message)
  local r, err = retry_after(value, now)
  assert.is_nil(r, ("%q gave %s"):format(tostring(value), tostring(r)))
  assert.is_string(err)
  assert.truthy(err:find("^Retry%-After: "), err)
  assert.truthy(#err < 80, err)
  if message then assert.truthy(err:find(message, 1, true), err) end
end

local function same_number(expected, got)
  assert.is_number(got)
  assert.equal(expected, got)
  if math.type then assert.equal("float", math.type(got)) end
end

describe("retry_after", function()
  it("checks this spec's reference instant against gmtime", function()
    local t = os.date("!*t", T)
    assert.same({ 1994, 11, 6, 8, 49, 37, 1 },
      { t.year, t.month, t.day, t.hour, t.min, t.sec, t.wday })
    assert.equal(IMF, (forms(T)))
    assert.equal(2025, os.date("!*t", JUN_2025).year)
    assert.equal(2090, os.date("!*t", JAN_2090).year)
  end)

  describe("delay-seconds", function()
    it("gives that many seconds", function()
      same_number(0, retry_after("0"))
      same_number(120, retry_after("120"))
      same_number(1, retry_after("1"))
      same_number(86400, retry_after("86400"))
    end)

    it("reads leading zeros as decimal", function()
      same_number(7, retry_after("007"))
      same_number(8, retry_after("08"))
      same_number(0, retry_after("0000"))
      same_number(5, retry_after(("0"):rep(10000) .. "5"))
    end)

    it("ignores spaces and tabs around the value (OWS)", function()
      same_number(120, retry_after(" 120"))
      same_number(120, retry_after("120 "))
      same_number(120, retry_after("\t 120 \t"))
      same_number(120, retry_after((" "):rep(5000) .. "120"))
    end)

    it("saturates at 2^31 seconds, never inf", function()
      same_number(2147483647, retry_after("2147483647"))
      same_number(CAP, retry_after("2147483648"))
      same_number(CAP, retry_after("2147483649"))
      same_number(CAP, retry_after("9999999999"))
      same_number(CAP, retry_after("18446744073709551616"))
      same_number(CAP, retry_after(("9"):rep(400)))
      same_number(CAP, retry_after("1" .. ("0"):rep(100000)))
    end)

    it("does not look at now", function()
      same_number(120, retry_after("120", 0))
      same_number(120, retry_after("120", T))
      same_number(120, retry_after("120", -1e300))
    end)

    for _, v in ipairs { "-1", "+1", "-0", "1.5", "1.", ".5", "1,5", "1e3",
      "0x10", "0X1A", "12abc", "abc", "1 2", "1\t2", "12 abc", "inf",
      "nan", "\n120", "120\r\n", "\v120", "\0", "120\0", "\194\178",
      "1_000", "(120)", "120s" } do
      it(("refuses %q"):format(v), function()
        fails(v, T, "not delay-seconds or an HTTP-date")
      end)
    end

    it("refuses an empty or blank value", function()
      fails("", T, "empty")
      fails("  ", T, "empty")
      fails(" \t ", T, "empty")
    end)
  end)

  describe("a value that is not a string", function()
    it("gives nil and a message for nil, a table, a boolean, a function",
       function()
      fails(nil, T, "string expected, got nil")
      fails({ "120" }, T, "string expected, got table")
      fails(true, T, "string expected, got boolean")
      fails(print, T, "string expected, got function")
    end)

    it("takes a finite number >= 0 as delay-seconds (capped)", function()
      same_number(5, retry_after(5))
      same_number(0, retry_after(0))
      same_number(0, retry_after(-0.0))
      same_number(1.5, retry_after(1.5))
      same_number(CAP, retry_after(1e300))
      same_number(CAP, retry_after(CAP + 1))
    end)

    it("refuses a negative, NaN or infinite number", function()
      fails(-1, T, "negative")
      fails(-1e-300, T, "negative")
      fails(0 / 0, T, "finite")
      fails(1 / 0, T, "finite")
      fails(-1 / 0, T)
    end)
  end)

  describe("HTTP-date", function()
    for _, v in ipairs { IMF, RFC850, ASCTIME, "Sun Nov 06 08:49:37 1994",
      " \t" .. IMF .. "\t ", "  " .. ASCTIME .. "  " } do
      it(("reads %q as RFC 9110's example instant"):format(v), function()
        same_number(120, retry_after(v, T - 120))
        same_number(1, retry_after(v, T - 1))
        same_number(0.25, retry_after(v, T - 0.25))
        same_number(0, retry_after(v, T))
        same_number(0, retry_after(v, T + 1))
        same_number(0, retry_after(v, T + 1e9))
        same_number(T, retry_after(v, 0))
        if v ~= RFC850 then         -- its century depends on now
          same_number(CAP, retry_after(v, T - CAP - 1))
          same_number(CAP, retry_after(v, -1e300))
          same_number(0, retry_after(v, 1e300))
        end
      end)
    end

    it("gives a number in [0, 2^31] for RFC 850 with any finite now",
       function()
      for _, now in ipairs { -1e300, -1e15, -T, 1e15, 1e300, 2 ^ 53,
        -2 ^ 53, 1.7976931348623157e308, -1.7976931348623157e308 } do
        local r = retry_after(RFC850, now)
        assert.is_number(r)
        assert.truthy(r >= 0 and r <= CAP, tostring(now) .. " gave " .. r)
      end
      -- seen from 1926, "94" is 1894 (1994 is 68 years ahead)
      same_number(0, retry_after(RFC850, T - CAP - 1))
    end)

    it("gives a float for an integer now too (math.type)", function()
      if not math.type then return end
      assert.equal("float", math.type(retry_after(IMF, T - 5)))
      assert.equal("float", math.type(retry_after(IMF, math.mininteger)))
      assert.equal(CAP, retry_after(IMF, math.mininteger))
      assert.equal(0, retry_after(IMF, math.maxinteger))
    end)

    it("accepts Feb 29 in leap years only", function()
      -- 2000-02-29 is 951782400 (divisible by 400: leap)
      same_number(951782400, retry_after("Tue, 29 Feb 2000 00:00:00 GMT",
        0))
      same_number(1078012800, retry_after("Sun, 29 Feb 2004 00:00:00 GMT",
        0))
      same_number(1078012800, retry_after("Sun Feb 29 00:00:00 2004", 0))
      same_number(0, retry_after("Thu, 29 Feb 1996 00:00:00 GMT", JUN_2025))
      fails("Thu, 29 Feb 1900 00:00:00 GMT", 0, "day out of range")
      fails("Fri, 29 Feb 2019 00:00:00 GMT", 0, "day out of range")
      fails("Mon, 29 Feb 2100 00:00:00 GMT", 0, "day out of range")
      fails("Mon Feb 29 00:00:00 2100", 0, "day out of range")
      fails("Tue, 30 Feb 2000 00:00:00 GMT", 0, "day out of range")
    end)

    it("knows each month's length", function()
      local len = { 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31 }
      for m = 1, 12 do
        local last = ("Mon, %02d %s 2001 00:00:00 GMT"):format(len[m],
          MONTH[m])
        local next = ("Mon, %02d %s 2001 00:00:00 GMT"):format(len[m] + 1,
          MONTH[m])
        assert.is_number(retry_after(last, 0), last)
        fails(next, 0, "day out of range")
      end
    end)

    it("refuses a wrong, misspelt or wrongly cased day name", function()
      fails("Sunday, 06 Nov 1994 08:49:37 GMT", T)
      fails("Sun, 06-Nov-94 08:49:37 GMT", T, "bad day name")
      fails("Xyz, 06 Nov 1994 08:49:37 GMT", T, "bad day name")
      fails("sun, 06 Nov 1994 08:49:37 GMT", T, "bad day name")
      fails("SUN, 06 Nov 1994 08:49:37 GMT", T, "bad day name")
      fails("Sundy, 06-Nov-94 08:49:37 GMT", T, "bad day name")
      fails("sunday, 06-Nov-94 08:49:37 GMT", T, "bad day name")
      fails("Xyz Nov  6 08:49:37 1994", T, "bad day name")
      fails(", 06 Nov 1994 08:49:37 GMT", T)
    end)

    it("takes a real day name that does not match the date", function()
      same_number(120, retry_after("Mon, 06 Nov 1994 08:49:37 GMT",
        T - 120))
      same_number(120, retry_after("Friday, 06-Nov-94 08:49:37 GMT",
        T - 120))
    end)

    it("refuses a wrong, misspelt or wrongly cased month name", function()
      fails("Sun, 06 Foo 1994 08:49:37 GMT", T, "bad month name")
      fails("Sun, 06 nov 1994 08:49:37 GMT", T, "bad month name")
      fails("Sun, 06 NOV 1994 08:49:37 GMT", T, "bad month name")
      fails("Sun, 06 November 1994 08:49:37 GMT", T)
      fails("Sunday, 06-Nox-94 08:49:37 GMT", T, "bad month name")
      fails("Sun Nox  6 08:49:37 1994", T, "bad month name")
      fails("Sun, 06 11 1994 08:49:37 GMT", T)
    end)

    it("refuses fields out of range", function()
      fails("Sun, 00 Nov 1994 08:49:37 GMT", T, "day out of range")
      fails("Sun, 32 Nov 1994 08:49:37 GMT", T, "day out of range")
      fails("Sun, 31 Nov 1994 08:49:37 GMT", T, "day out of range")
      fails("Sun, 06 Nov 1994 24:00:00 GMT", T, "hour out of range")
      fails("Sun, 06 Nov 1994 08:60:00 GMT", T, "minute out of range")
      fails("Sun, 06 Nov 1994 08:49:61 GMT", T, "second out of range")
      fails("Sun, 06 Nov 1994 99:99:99 GMT", T, "out of range")
      fails("Sunday, 00-Nov-94 08:49:37 GMT", T, "day out of range")
      fails("Sunday, 06-Nov-94 24:49:37 GMT", T, "hour out of range")
      fails("Sun Nov  0 08:49:37 1994", T, "day out of range")
      fails("Sun Nov 31 08:49:37 1994", T, "day out of range")
      fails("Sun Nov  6 08:49:37 1899", 0, "year before 1900")
      fails("Sun, 31 Dec 1899 23:59:59 GMT", 0, "year before 1900")
      fails("Sun, 06 Nov 0000 08:49:37 GMT", 0, "year before 1900")
    end)

    it("takes hour 23, minute 59, second 59 and 60 (a leap second)",
       function()
      same_number(T - 37 + 59 - (T - 1000),
        retry_after("Sun, 06 Nov 1994 08:49:59 GMT", T - 1000))
      -- 08:49:60 counts as 08:50:00, as POSIX time does
      same_number(T - 37 + 60 - (T - 1000),
        retry_after("Sun, 06 Nov 1994 08:49:60 GMT", T - 1000))
      same_number(T - 37 + 60 - (T - 1000),
        retry_after("Sun Nov  6 08:49:60 1994", T - 1000))
      -- 1998-12-31T23:59:60Z, a real leap second, is 915148800
      same_number(915148800, retry_after("Thu, 31 Dec 1998 23:59:60 GMT",
        0))
      same_number(915148799, retry_after("Thu, 31 Dec 1998 23:59:59 GMT",
        0))
      same_number(946684799, retry_after("Fri, 31 Dec 1999 23:59:59 GMT",
        0))
    end)

    it("requires GMT in IMF-fixdate and RFC 850 and refuses it in asctime",
       function()
      for _, v in ipairs { "Sun, 06 Nov 1994 08:49:37",
        "Sun, 06 Nov 1994 08:49:37 UTC", "Sun, 06 Nov 1994 08:49:37 gmt",
        "Sun, 06 Nov 1994 08:49:37 +0000", "Sun, 06 Nov 1994 08:49:37 GMTx",
        "Sun, 06 Nov 1994 08:49:37  GMT", "Sun, 06 Nov 1994 08:49:37 GMT x",
        "Sunday, 06-Nov-94 08:49:37", "Sunday, 06-Nov-94 08:49:37 UT" } do
        fails(v, T - 120, "must end in GMT")
      end
      fails("Sun Nov  6 08:49:37 1994 GMT", T - 120)
      fails("Sun Nov  6 08:49:37 GMT 1994", T - 120)
    end)

    it("refuses other layouts", function()
      for _, v in ipairs {
        "Sun, 6 Nov 1994 08:49:37 GMT",       -- one-digit day
        "Sun 06 Nov 1994 08:49:37 GMT",       -- no comma
        "Sun,06 Nov 1994 08:49:37 GMT",       -- no space
        "Sun,  06 Nov 1994 08:49:37 GMT",     -- two spaces
        "Sun, 06 Nov 94 08:49:37 GMT",        -- two-digit year
        "Sun, 06 Nov 01994 08:49:37 GMT",
        "Sun, 06 Nov 1994 8:49:37 GMT",
        "Sun, 06 Nov 1994 08:49 GMT",
        "Sun, 06 Nov 1994 08.49.37 GMT",
        "Sun, 06 Nov 1994T08:49:37 GMT",
        "Sun,\t06 Nov 1994 08:49:37 GMT",
        "Sun, 06-Nov-1994 08:49:37 GMT",
        "Sunday, 06-Nov-1994 08:49:37 GMT",
        "Sunday, 6-Nov-94 08:49:37 GMT",
        "Sunday, 06 Nov 94 08:49:37 GMT",
        "Sun Nov 6 08:49:37 1994",            -- asctime: needs two places
        "Sun Nov   6 08:49:37 1994",
        "Sun Nov  6 08:49:37 94",
        "Sun Nov  6 08:49:37  1994",
        "Sun  Nov  6 08:49:37 1994",
        "1994-11-06T08:49:37Z",
        "06 Nov 1994 08:49:37 GMT",
        "Sun, 06 Nov 1994 08:49:37 GMT, Sun, 06 Nov 1994 08:49:37 GMT",
        "120, Sun, 06 Nov 1994 08:49:37 GMT",
        "Sun, 06 Nov 1994 08:49:37 GMT\0",
        "Sun, 06 Nov 1994 08:49:37 GMT\n",
      } do
        local r, err = retry_after(v, T - 120)
        assert.is_nil(r, ("%q gave %s"):format(v, tostring(r)))
        assert.truthy(err:find("^Retry%-After: "), err)
      end
    end)
  end)

  describe("RFC 850 two-digit years", function()
    it("keeps a date up to 50 years ahead in the future", function()
      same_number(1893456000 - JUN_2025,
        retry_after("Tuesday, 01-Jan-30 00:00:00 GMT", JUN_2025))
      -- exactly 50 years ahead: not more than 50, so 2075
      same_number(3326572800 - JUN_2025,
        retry_after("Saturday, 01-Jun-75 00:00:00 GMT", JUN_2025))
      same_number(3326572800 - JUN_2025 - 0.5,
        retry_after("Saturday, 01-Jun-75 00:00:00 GMT", JUN_2025 + 0.5))
      -- half a second more than 50 years: 1975
      same_number(0,
        retry_after("Saturday, 01-Jun-75 00:00:00 GMT", JUN_2025 - 0.5))
    end)

    it("takes the past century for more than 50 years ahead", function()
      -- one second past 50 years: 1975, in the past
      same_number(0, retry_after("Sunday, 01-Jun-75 00:00:01 GMT",
        JUN_2025))
      same_number(0, retry_after("Monday, 02-Jun-75 00:00:00 GMT",
        JUN_2025))
      same_number(0, retry_after("Friday, 01-Jan-99 00:00:00 GMT",
        JUN_2025))
      -- the same date seen from 1970: 1975 is 5 years ahead
      same_number(170812800, retry_after("Sunday, 01-Jun-75 00:00:00 GMT",
        0))
      -- and 94 from 1994 is 1994, the RFC's example
      same_number(120, retry_after(RFC850, T - 120))
    end)

    it("takes the next century for a year up to 50 years ahead of now",
       function()
      -- seen from 2090, "10" is 2110 (20 years ahead), not 2010
      same_number(631065600, retry_after("Wednesday, 01-Jan-10 00:00:00 GMT",
        JAN_2090))
      same_number(0, retry_after("Saturday, 01-Jan-50 00:00:00 GMT",
        JAN_2090))
    end)

    it("checks Feb 29 in the year the window gives", function()
      -- "00" is 2000 (leap) seen from 2025, 2100 (not leap) from 2090
      same_number(0, retry_after("Tuesday, 29-Feb-00 00:00:00 GMT",
        JUN_2025))
      fails("Monday, 29-Feb-00 00:00:00 GMT", JAN_2090, "day out of range")
    end)
  end)

  describe("calendar arithmetic", function()
    it("matches gmtime for random instants in 1900..9999, in all three "
       .. "forms", function()
      local seed = 20251112
      math.randomseed(seed)
      local first = -25567              -- 1900-01-01, in days since 1970
      local last = 2932896              -- 9999-12-31
      for i = 1, 3000 do
        local days = math.random(first, last)
        local x = days * 86400 + math.random(0, 86399)
        local imf, rfc850, asctime = forms(x)
        -- in [0, 2^31): Lua 5.1's math.random(m, n) takes C ints only
        local k = math.random(0, 32767) * 65536 + math.random(0, 65535)
        local where = ("seed %d, #%d, x = %d, k = %d"):format(seed, i, x, k)
        assert.equal(k, retry_after(imf, x - k), where .. ": " .. imf)
        assert.equal(k, retry_after(asctime, x - k), where .. ": " .. asctime)
        assert.equal(0, retry_after(imf, x + k), where .. ": " .. imf)
        -- RFC 850 names the century through now: within 31 years
        local k850 = k % 1000000000
        assert.equal(k850, retry_after(rfc850, x - k850),
          where .. ": " .. rfc850)
        assert.equal(0, retry_after(rfc850, x + k850),
          where .. ": " .. rfc850)
      end
    end)

    it("matches gmtime on the first and last second of every month of a "
       .. "leap and a common year and of the span", function()
      for _, x in ipairs { -2208988800, 0, 951868799, 951868800, 253402300799,
        4107542400, 4107542399, 2147483647, 2147483648, -1 } do
        local imf, _, asctime = forms(x)
        assert.equal(1000, retry_after(imf, x - 1000), imf)
        assert.equal(1000, retry_after(asctime, x - 1000), asctime)
      end
      for _, y in ipairs { 1900, 1970, 2000, 2023, 2024, 2100 } do
        for m = 1, 12 do
          local first = os.time { year = y, month = m, day = 1, hour = 12 }
          local t = os.date("!*t", first)
          -- noon local time is the same UTC day in any zone within 12 h
          assert.equal(1, t.day)
          local x = first - ((t.hour * 60 + t.min) * 60 + t.sec)
          local imf = forms(x)
          assert.equal(1, retry_after(imf, x - 1), imf)
          if x > -2208988800 then        -- 1899 is out of range
            assert.equal(1, retry_after(forms(x - 1), x - 2), forms(x - 1))
          end
        end
      end
    end)

    it("agrees with os.time on differences between dates in one zone",
       function()
      -- os.time reads the local zone, so compare day counts only: noon to
      -- noon, with isdst = false on both ends, is a whole number of days
      -- in any zone whose standard offset did not change in between
      math.randomseed(7)
      for _ = 1, 200 do
        local y1, y2 = math.random(1971, 2037), math.random(1971, 2037)
        local m1, m2 = math.random(1, 12), math.random(1, 12)
        local d1, d2 = math.random(1, 28), math.random(1, 28)
        local a = os.time { year = y1, month = m1, day = d1, hour = 12,
                            isdst = false }
        local b = os.time { year = y2, month = m2, day = d2, hour = 12,
                            isdst = false }
        local days = math.floor((b - a) / 86400 + 0.5)
        local da = retry_after(("Mon, %02d %s %04d 12:00:00 GMT"):format(d1,
          MONTH[m1], y1), 0)
        local db = retry_after(("Mon, %02d %s %04d 12:00:00 GMT"):format(d2,
          MONTH[m2], y2), 0)
        assert.equal(days * 86400, db - da)
      end
    end)
  end)

  describe("now", function()
    local saved
    before_each(function() saved = rawget(_G, "ngx") end)
    after_each(function() rawset(_G, "ngx", saved) end)

    -- ngx.now, not ngx.time: whole seconds made a wait up to 1 s long
    it("defaults to ngx.now() when a global ngx has now", function()
      local calls = 0
      rawset(_G, "ngx", { now = function()
        calls = calls + 1
        return T - 60
      end, time = function() error("ngx.time: whole seconds") end })
      same_number(60, retry_after(IMF))
      same_number(60, retry_after(RFC850))
      same_number(60, retry_after(ASCTIME, nil))
      assert.equal(3, calls)
      same_number(5, retry_after(IMF, T - 5))   -- an explicit now wins
      same_number(7, retry_after("7"))          -- seconds need no clock
      fails("nonsense")
      assert.equal(3, calls)
    end)

    it("defaults to os.time() otherwise", function()
      rawset(_G, "ngx", { sleep = function() end })  -- no time field
      local before = os.time()
      local r = retry_after((forms(before + 1000)))
      local after = os.time()
      assert.truthy(r <= 1000 and r >= 1000 - (after - before), r)
      rawset(_G, "ngx", nil)
      r = retry_after((forms(before + 1000)))
      after = os.time()
      assert.truthy(r <= 1000 and r >= 1000 - (after - before), r)
    end)

    it("raises, naming now, when now is not a finite number", function()
      for _, bad in ipairs { "0", {}, true, 0 / 0, 1 / 0, -1 / 0 } do
        for _, v in ipairs { "120", IMF, "junk" } do
          assert.error_matches(function() retry_after(v, bad) end,
            "finite number expected for 'now'", nil, true)
        end
      end
      assert.error_matches(function() retry_after(IMF, "1") end,
        "bad argument #2 to 'retry_after'", nil, true)
      assert.error_matches(function() retry_after(IMF, 0 / 0) end,
        "got nan)", nil, true)          -- not "-nan" (glibc)
    end)
  end)

  it("never raises on strings: mutations of valid values", function()
    math.randomseed(99)
    local alphabet = "0123456789 \t,-:SunNovGMTFebdayMT+.\0\255"
    local bases = { IMF, RFC850, ASCTIME, "120", "0" }
    for i = 1, 5000 do
      local s = bases[i % #bases + 1]
      for _ = 1, math.random(1, 3) do
        local p = math.random(1, #s + 1)
        local c = math.random(1, #alphabet)
        local op = math.random(1, 3)
        if op == 1 then                         -- replace
          s = s:sub(1, p - 1) .. alphabet:sub(c, c) .. s:sub(p + 1)
        elseif op == 2 then                     -- insert
          s = s:sub(1, p - 1) .. alphabet:sub(c, c) .. s:sub(p)
        else                                    -- delete
          s = s:sub(1, p - 1) .. s:sub(p + 1)
        end
      end
      local ok, r, err = pcall(retry_after, s, T - 120)
      assert.is_true(ok, ("%q raised %s"):format(s, tostring(r)))
      if r == nil then
        assert.truthy(err:find("^Retry%-After: "), err)
      else
        assert.truthy(r >= 0 and r <= CAP, ("%q gave %s"):format(s, r))
      end
    end
  end)
end)

describe("backoff.retry_after", function()
  it("is the parser, reachable from the module", function()
    local backoff = require "backoff"
    assert.equal(require "backoff.retry_after", backoff.retry_after)
    assert.equal(120, backoff.retry_after("120"))
    assert.equal(120, backoff.retry_after("Sun, 06 Nov 1994 08:49:37 GMT",
      784111657))
  end)
end)
