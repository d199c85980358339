-- backoff.http's pure parts: idempotency, "did it reach the server",
-- per-try timeouts, header lookup and the server's hints.
local http = require "backoff.http"
local backoff = require "backoff"

describe("backoff.http.idempotent", function()
  it("follows RFC 9110 9.2.2, case-sensitively", function()
    for _, m in ipairs { "GET", "HEAD", "OPTIONS", "TRACE", "PUT",
                         "DELETE" } do
      assert.is_true(http.idempotent(m), m)
    end
    for _, m in ipairs { "POST", "PATCH", "CONNECT", "LOCK", "get",
                         "Put", "PROPFIND" } do
      assert.is_false(http.idempotent(m), m)
    end
  end)

  it("takes ngx.HTTP_* constants", function()
    assert.is_true(http.idempotent(2))          -- ngx.HTTP_GET
    assert.is_true(http.idempotent(32768))      -- ngx.HTTP_TRACE
    assert.is_false(http.idempotent(8))         -- ngx.HTTP_POST
    assert.is_false(http.idempotent(16384))     -- ngx.HTTP_PATCH
  end)

  it("makes any method idempotent with an Idempotency-Key", function()
    for _, h in ipairs {
      { ["Idempotency-Key"] = "8e03978e-40d5-43e8-bc93-6894a57f9324" },
      { ["idempotency-key"] = "k" },
      { ["IDEMPOTENCY-KEY"] = { "k", "k2" } },
    } do
      assert.is_true(http.idempotent("POST", h))
    end
    for _, h in ipairs { {}, { ["Idempotency-Key"] = "" },
        { ["Idempotency-Key"] = "  " }, { ["Idempotency-Key"] = 5 },
        { ["Idempotency-Keys"] = "k" }, { ["Idempotency-Key"] = {} } } do
      assert.is_false(http.idempotent("POST", h))
    end
  end)

  it("refuses bad arguments by name", function()
    for _, m in ipairs { nil, "", "G ET", "GET\r\n", 3, 2.5, {},
                         ("G"):rep(65) } do
      assert.error_matches(function() http.idempotent(m) end,
        "bad argument #1 to 'idempotent'", nil, true)
    end
    assert.error_matches(function() http.idempotent("GET", "k") end,
      "bad argument #2 to 'idempotent' (table or nil expected for "
      .. "'headers', got string)", nil, true)
  end)
end)

describe("backoff.http.not_sent", function()
  it("is true only when the request certainly did not leave", function()
    assert.is_true(http.not_sent("connection refused"))
    assert.is_true(http.not_sent("Connection refused"))
    assert.is_true(http.not_sent("no route to host"))
    assert.is_true(http.not_sent("network is unreachable"))
    assert.is_true(http.not_sent("example.invalid could not be resolved "
      .. "(3: Host not found)"))
    assert.is_true(http.not_sent("no resolver defined to resolve "
      .. "\"example.com\""))
    assert.is_true(http.not_sent("timeout", "connect"))
    assert.is_true(http.not_sent(nil, "connect"))
    for _, e in ipairs { "timeout", "closed", "connection reset by peer",
                         "broken pipe", "" } do
      assert.is_false(http.not_sent(e), e)
      assert.is_false(http.not_sent(e, "read"), e)
      assert.is_false(http.not_sent(e, "send"), e)
    end
    assert.is_false(http.not_sent({ "connection refused" }))
    assert.is_false(http.not_sent(nil))
  end)

  it("refuses a stage that is not a string", function()
    assert.error_matches(function() http.not_sent("x", 1) end,
      "bad argument #2 to 'not_sent' (string or nil expected for 'stage', "
      .. "got number)", nil, true)
  end)
end)

describe("backoff.http.timeouts", function()
  it("hands the try's timeout in milliseconds, as set_timeouts takes it",
    function()
      assert.same({ connect = 500, send = 500, read = 500, timeout = 0.5 },
                  http.timeouts(0.5))
      assert.same({ connect = 100, send = 250, read = 1000, timeout = 1 },
        http.timeouts(1, { connect = 0.1, send = 0.25 }))
      local t = http.timeouts(2, { connect = false })
      assert.same({ nil, 2000, 2000 }, { t.connect, t.send, t.read })
    end)

  it("rounds down to whole milliseconds, never below 1", function()
    assert.same({ 1, 1, 1 }, { http.timeouts(0.0001).connect,
      http.timeouts(0.0009).send, http.timeouts(1e-9).read })
    assert.equal(1234, http.timeouts(1.2349).read)
  end)

  it("gives nil for no timeout", function()
    assert.is_nil(http.timeouts(nil))
  end)

  -- 1e306 s x 1000 overflowed to inf ms: a policy with a huge
  -- max_actual_duration handed do_request inf; and a cosocket refuses
  -- more than 2^31 - 1 ms ("bad timeout value")
  it("hands out whole milliseconds up to 2^31 - 1, never inf", function()
    for _, c in ipairs { { 1e306 }, { 1e300, { connect = 1e10 } },
                         { 2 ^ 53 }, { 1.7976931348623157e308 } } do
      local t = http.timeouts(c[1], c[2])
      for _, side in ipairs { "connect", "send", "read" } do
        local v = t[side]
        assert.is_true(v >= 1 and v <= 2 ^ 31 - 1 and v == math.floor(v),
                       side .. " " .. tostring(v))
      end
      assert.equal(c[1], t.timeout)
    end
    assert.equal(2 ^ 31 - 1, http.timeouts(1e306).read)
    assert.equal(2 ^ 31 - 1, http.timeouts(2 ^ 31 / 1000).read)
    assert.equal(2 ^ 31 - 2, http.timeouts((2 ^ 31 - 2) / 1000).read)
    local p = backoff.constant { delay = 0, max_attempts = 1,
      max_actual_duration = 1e308, adjust_timeout_factor = 0.5 }
    local got
    http.request(p, function(_, t) got = t return 200 end, { method = "GET" })
    assert.equal(2 ^ 31 - 1, got.connect)
  end)

  it("refuses bad arguments by name", function()
    for _, t in ipairs { 0, -1, 0 / 0, math.huge, "1", {} } do
      assert.error_matches(function() http.timeouts(t) end,
        "bad argument #1 to 'timeouts' (a finite number > 0 or nil", nil,
        true)
    end
    for _, f in ipairs { 1, { write = 1 }, { read = 0 }, { read = -1 },
                         { read = "1" }, { read = 1 / 0 } } do
      assert.error_matches(function() http.timeouts(1, f) end,
        "bad argument #2 to 'timeouts'", nil, true)
    end
  end)
end)

describe("backoff.http.header", function()
  it("finds a header in any case, the first of a repeated one", function()
    assert.equal("1", http.header({ ["Retry-After"] = "1" }, "retry-after"))
    assert.equal("2", http.header({ ["retry-after"] = "2" }, "Retry-After"))
    assert.equal("3", http.header({ ["RETRY-AFTER"] = { "3", "4" } },
                                  "Retry-After"))
    assert.is_nil(http.header({}, "Retry-After"))
    assert.is_nil(http.header({ ["Retry-After"] = 5 }, "Retry-After"))
    assert.is_nil(http.header("Retry-After: 1", "Retry-After"))
  end)

  it("reads through a case-insensitive table such as lua-resty-http's",
    function()
      local store = { ["retry-after"] = "7" }
      local h = setmetatable({}, { __index = function(_, k)
        return store[k:lower()] end })
      assert.equal("7", http.header(h, "Retry-After"))
    end)

  it("never raises on a hostile table", function()
    local h = setmetatable({}, { __index = function() error("boom") end })
    assert.is_nil(http.header(h, "Retry-After"))
    local h2 = setmetatable({}, { __pairs = function() error("boom") end,
                                  __index = function() return nil end })
    assert.is_nil(http.header(h2, "Retry-After"))
  end)

  it("refuses a name that is not a string", function()
    assert.error_matches(function() http.header({}, 5) end,
      "bad argument #2 to 'header' (string expected for 'name', got "
      .. "number)", nil, true)
  end)
end)

describe("backoff.http.hint", function()
  local NOW = 1700000000   -- 2023-11-14T22:13:20Z

  it("reads Retry-After, seconds and HTTP-date, on any status", function()
    assert.same({ 120, "Retry-After" },
      { http.hint({ ["Retry-After"] = "120" }, 503, NOW) })
    assert.same({ 2, "Retry-After" }, { http.hint(
      { ["retry-after"] = "Tue, 14 Nov 2023 22:13:22 GMT" }, 429, NOW) })
    assert.same({ 0, "Retry-After" }, { http.hint(
      { ["Retry-After"] = "Tue, 14 Nov 2023 22:13:00 GMT" }, 503, NOW) })
    assert.same({ 3, "Retry-After" },
      { http.hint({ ["Retry-After"] = " 3 " }, nil, NOW) })
  end)

  it("reads RateLimit-Reset and X-RateLimit-Reset on a 429", function()
    assert.same({ 30, "RateLimit-Reset" },
      { http.hint({ ["RateLimit-Reset"] = "30" }, 429, NOW) })
    assert.same({ 5, "X-RateLimit-Reset" },
      { http.hint({ ["X-RateLimit-Reset"] = tostring(NOW + 5) }, 429, NOW) })
    assert.same({ 0, "X-RateLimit-Reset" },
      { http.hint({ ["X-RateLimit-Reset"] = tostring(NOW - 5) }, 429, NOW) })
    assert.same({ 1.5, "X-RateLimit-Reset" },
      { http.hint({ ["x-ratelimit-reset"] = "1.5" }, 429, NOW) })
    assert.same({ 0.25, "X-RateLimit-Reset" }, { http.hint(
      { ["X-RateLimit-Reset"] = ("%.2f"):format(NOW + 0.25) }, 429, NOW) })
  end)

  it("tells seconds from a Unix time at 1,000,000,000", function()
    assert.same({ 999999999 }, { (http.hint(
      { ["RateLimit-Reset"] = "999999999" }, 429, NOW)) })
    assert.same({ 0 }, { (http.hint(
      { ["RateLimit-Reset"] = "1000000000" }, 429, NOW)) })
  end)

  it("reads a reset after another status only when the quota is 0",
    function()
      local h = { ["RateLimit-Reset"] = "30", ["RateLimit-Remaining"] = "7",
                  ["X-RateLimit-Reset"] = "40" }
      assert.is_nil(http.hint(h, 503, NOW))
      h["X-RateLimit-Remaining"] = "0"
      assert.same({ 40, "X-RateLimit-Reset" }, { http.hint(h, 403, NOW) })
      h["RateLimit-Remaining"] = " 0 "
      assert.same({ 30, "RateLimit-Reset" }, { http.hint(h, 503, NOW) })
    end)

  it("prefers Retry-After, then RateLimit-Reset, then X-RateLimit-Reset",
    function()
      local h = { ["Retry-After"] = "1", ["RateLimit-Reset"] = "2",
                  ["X-RateLimit-Reset"] = "3" }
      assert.equal(1, (http.hint(h, 429, NOW)))
      h["Retry-After"] = "soon"             -- malformed: the next one
      assert.equal(2, (http.hint(h, 429, NOW)))
      h["RateLimit-Reset"] = "-2"
      assert.equal(3, (http.hint(h, 429, NOW)))
    end)

  it("ignores malformed values, caps huge ones", function()
    for _, v in ipairs { "", "-1", "1e3", "0x10", "1.", ".5", "abc", "1 2",
                         ("9"):rep(40) } do
      assert.is_nil(http.hint({ ["RateLimit-Reset"] = v }, 429, NOW), v)
    end
    assert.equal(2 ^ 31, (http.hint({ ["Retry-After"] = ("9"):rep(30) },
                                    503, NOW)))
    assert.equal(2 ^ 31, (http.hint({ ["RateLimit-Reset"] = "9999999999" },
                                    429, 0)))
  end)

  it("gives nil without headers, and never raises on hostile headers",
    function()
      assert.is_nil(http.hint(nil, 503))
      assert.is_nil(http.hint("Retry-After: 1", 503))
      local h = setmetatable({}, { __index = function() error("boom") end })
      assert.is_nil(http.hint(h, 429, NOW))
    end)

  it("refuses bad arguments by name", function()
    assert.error_matches(function() http.hint({}, "503") end,
      "bad argument #2 to 'hint' (number or nil expected for 'status'",
      nil, true)
    for _, now in ipairs { 0 / 0, math.huge, "1" } do
      assert.error_matches(function() http.hint({}, 503, now) end,
        "bad argument #3 to 'hint' (finite number expected for 'now'", nil,
        true)
    end
  end)
end)
