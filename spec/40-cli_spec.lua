-- backoff-delays, run in-process: the Perl docs' show-backoff-delays
-- illustrations, and its own options.
local cli = require "backoff.cli"
local cases = require "spec.data.perl_examples"

local function run(argv)
  local out, notes = {}, {}
  local status = cli.run(argv, function(s) out[#out + 1] = s end,
    function(s) notes[#notes + 1] = s end)
  return status, table.concat(out), table.concat(notes)
end

local function lines(s)
  local t = {}
  for l in s:gmatch("[^\n]+") do t[#t + 1] = l end
  return t
end

describe("backoff-delays", function()
  it("prints a system's sequence for given draws (Google's javadoc)",
    function()
      local status, out = run { "-a", "google", "--random", "0.5",
        "0", "0", "0", "0", "0", "0" }
      assert.equal(0, status)
      assert.equal("0.5\n0.75\n1.125\n1.687\n2.53\n3.795\n", out)
    end)

  it("uses the --random list in order, then again", function()
    local status, out = run { "-a", "exponential", "--initial-delay", "1",
      "--jitter", "full", "--random", "0,0.5", "0", "0", "0" }
    assert.equal(0, status)
    assert.equal("0\n1\n0\n", out)
  end)

  it("takes flags and names: --use-jitter, --backoff-type", function()
    local status, out = run { "-a", "polly", "--backoff-type", "linear",
      "--delay", "1", "--use-jitter", "--random", "0.5", "0", "0", "0",
      "0" }
    assert.equal(0, status)
    assert.equal("1\n2\n3\ngive up (max_attempts)\n", out)
  end)

  it("explains a bad --random list or draw on stderr and exits 2",
    function()
      local status, out, err = run { "-a", "google", "--random", "a,b", "0" }
      assert.equal(2, status)
      assert.equal("", out)
      assert.matches("--random: not a number: 'a'", err, 1, true)
      status, out, err = run { "-a", "google", "--random", "2", "0" }
      assert.equal(2, status)
      assert.equal("", out)
      assert.matches("option 'random' must return a number in [0, 1]", err,
        1, true)
    end)

  it("prints 2 6 10 2 1 1 5 9 13 for the LIMD example", function()
    local status, out = run { "-a", "LIMD", "--initial-delay", "2",
      "--min-delay", "1", "--delay-increment-on-failure", "4",
      "--delay-multiple-on-success", "0.2",
      "0", "0", "0", "1", "1", "1", "0", "0", "0" }
    assert.equal(0, status)
    assert.equal("2\n6\n10\n2\n1\n1\n5\n9\n13\n", out)
  end)

  it("runs the LIMD example as the Perl docs spell it (-a LILD), "
     .. "with a note", function()
    local status, out, note = run { "-a", "LILD", "--initial-delay", "2",
      "--min-delay", "1", "--delay-increment-on-failure", "4",
      "--delay-multiple-on-success", "0.2",
      "0", "0", "0", "1", "1", "1", "0", "0", "0" }
    assert.equal(0, status)
    assert.equal("2\n6\n10\n2\n1\n1\n5\n9\n13\n", out)
    assert.matches("using limd", note)
  end)

  for _, case in ipairs(cases) do
    local simple = case.start_timestamp == 0 and type(case.expect[1])
      == "number"
    for _, op in ipairs(case.ops) do simple = simple and op[2] == 0 end
    if simple then
      it("reproduces " .. case.name, function()
        local argv = { "-a", case.strategy:upper() }
        for k, v in pairs(case.params) do
          if v == true then
            argv[#argv + 1] = "--" .. k:gsub("_", "-")
          else
            argv[#argv + 1] = "--" .. k:gsub("_", "-")
            argv[#argv + 1] = tostring(v)
          end
        end
        for _, op in ipairs(case.ops) do
          argv[#argv + 1] = op[1] == "failure" and "0" or "1"
        end
        local status, out = run(argv)
        assert.equal(0, status, out)
        local got = lines(out)
        for i, want in ipairs(case.expect) do
          if want == -1 then
            assert.matches("^give up %(", got[i])
          else
            assert.equal(want, tonumber(got[i]), case.name .. " line " .. i)
          end
        end
      end)
    end
  end

  it("prints timeouts, give-ups and explicit times", function()
    local status, out = run { "-a", "retry_timeouts", "--jitter-factor", "0",
      "--timeout-jitter-factor", "0", "--max-attempts", "3",
      "0", "0@1.4142135623730951", "0@2" }
    assert.equal(0, status)
    local l = lines(out)
    assert.equal("1.414213562\t24.29289322", l[1])
    assert.equal("2\t23.29289322", l[2])
    assert.equal("give up (max_attempts)", l[3])
  end)

  it("draws a chart scaled to the largest delay, saying its unit and "
     .. "scale", function()
    local _, out = run { "-a", "exponential", "--initial-delay", "1",
      "--chart", "0", "0", "0", "1" }
    local l = lines(out)
    assert.equal("delay (s)    one # = 0.08 s (the largest, 4 s, is 50 #)",
      l[1])
    assert.equal("1            " .. ("#"):rep(13), l[2])
    assert.matches("^2%s+" .. ("#"):rep(25) .. "$", l[3])
    assert.matches("^4%s+" .. ("#"):rep(50) .. "$", l[4])
    assert.equal("0", l[5])         -- no bar, no trailing blanks
    -- with timeouts, both columns are named; all zero: no scale
    _, out = run { "-a", "retry_timeouts", "--jitter-factor", "0",
      "--timeout-jitter-factor", "0", "--chart", "0" }
    assert.matches("^delay\ttimeout %(s%) +one # = ", lines(out)[1])
    _, out = run { "-a", "constant", "--delay", "0", "--chart", "0", "0" }
    assert.equal("delay (s)    every delay is 0 s\n0\n0\n", out)
    -- without --chart, nothing but the numbers
    _, out = run { "-a", "exponential", "--initial-delay", "1", "0" }
    assert.equal("1\n", out)
  end)

  it("makes jitter reproducible with --seed", function()
    local argv = { "-a", "exponential", "--initial-delay", "1", "--jitter",
      "full", "--seed", "42", "0", "0", "0" }
    local _, a = run(argv)
    local _, b = run(argv)
    assert.equal(a, b)
    assert.equal("0.08386297106", lines(a)[1])
  end)

  it("explains mistakes on stderr and exits 2", function()
    local status, out, err = run { "-a", "constant", "--dealy", "1", "0" }
    assert.equal(2, status)
    assert.equal("", out)
    assert.matches("unknown option 'dealy'", err)
    status, out, err = run { "0", "1" }
    assert.equal(2, status)
    assert.equal("", out)
    assert.matches("no strategy", err)
    assert.matches("usage: backoff%-delays", err)
    status, out, err = run { "-a", "constant", "--delay", "1", "2" }
    assert.equal(2, status)
    assert.equal("", out)
    assert.matches("bad outcome '2'", err)
    status, out, err = run { "--help" }
    assert.equal(0, status)
    assert.matches("usage: backoff%-delays", out)
    assert.equal("", err)
  end)

  it("with no outcome to print, prints the usage on stderr and exits 2",
    function()
      local none = { {}, { "-a", "exponential" },
                     { "-a", "constant", "--delay", "1", "--chart" } }
      for _, argv in ipairs(none) do
        local status, out, err = run(argv)
        assert.equal(2, status, table.concat(argv, " "))
        assert.equal("", out)
        assert.matches("usage: backoff%-delays", err)
      end
      local _, _, err = run { "-a", "exponential" }
      assert.matches("^backoff%-delays: no outcome to print: give 0 %(a "
        .. "failure%) or 1 %(a success%)", err)
    end)

  it("as a command: stdout, stderr and the exit status", function()
    -- the script of the checkout, under the interpreter running this
    -- spec (the installed commands: spec/rock/run.sh, spec/install/)
    local root = (debug.getinfo(1, "S").source:match("^@(.-)[^/]*$")
      or "./") .. "../"
    local script = io.open(root .. "bin/backoff-delays")
    local cpath = package.cpath:match("([^;]*build/[^;]*)")
    if not (script and cpath) then
      pending("no checkout here: bin/ and build/ are not in this copy")
      return
    end
    script:close()
    local lua = rawget(_G, "jit") and "luajit"
      or "lua" .. _VERSION:match("%d+%.%d+")
    local env = ("LUA_PATH='%slua/?.lua;;' LUA_CPATH='%s;;' "):format(root,
      cpath)
    local function sh(args)
      local tmp = os.tmpname()
      local p = io.popen(env .. lua .. " " .. root .. "bin/backoff-delays "
        .. args
        .. " 2>" .. tmp .. "; echo \"exit=$?\"")
      local out = p:read("*a")
      p:close()
      local f = io.open(tmp)
      local err = f:read("*a")
      f:close()
      os.remove(tmp)
      return tonumber(out:match("exit=(%d+)%s*$")),
        (out:gsub("exit=%d+%s*$", "")), err
    end
    local code, out, err = sh("-a exponential --initial-delay 1")
    assert.equal(2, code)
    assert.equal("", out)
    assert.matches("usage: backoff%-delays", err)
    code, out, err = sh("-a exponential --initial-delay 1 0 0")
    assert.equal(0, code, err)
    assert.equal("1\n2\n", out)
    assert.equal("", err)
  end)

  it("names in its usage line every part of the documented syntax",
    function()
      -- the usage: everything before the first blank line
      local usage = cli.usage:match("^usage: (.-)\n\n"):gsub("%s+", " ")
      for _, part in ipairs { "-a STRATEGY", "[--OPTION VALUE ...]",
                              "[--random LIST]", "[--chart]", "OUTCOME..." } do
        assert.truthy(usage:find(part, 1, true), part)
      end
    end)
end)
